"""The one key store and MAC that learn's seals and an interview's seal share (grader.output.hmac_key)."""

import hashlib
import hmac
import json
import os

import pytest

from grader.interview import seal
from grader.learn import vouch
from grader.output import hmac_key
from grader.output.hmac_key import KeyFileError, KeyStore

KEY = bytes(range(32))
TASKS = {"cache": "ab" * 32, "forward": "cd" * 32}
SETTINGS = {"kata": "moe", "tasks": ["router", "top_k"], "candidate": "Ada", "practice": False}


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def test_a_grades_seal_is_the_hmac_the_seals_on_disk_were_made_with():
    """HMAC-SHA256 of b"kata-grades\\0" + the canonical JSON of [kata, tasks]: seals.json files written before
    the key store and the MAC had one module still vouch."""
    before = hmac.new(KEY, b"kata-grades\0" + _canonical(["kv_cache", TASKS]), hashlib.sha256).hexdigest()
    assert hmac_key.mac(KEY, vouch.LABELS, ["kv_cache", TASKS]) == before
    assert before == "c2fc27a4b5c7ef5a8ef96e8ec74804f265fb195b5dcb7b753bb23ab6659f7935"


def test_an_interview_field_seal_is_the_hmac_the_states_on_disk_were_made_with():
    """HMAC-SHA256 of "kata-interview\\0ID\\0FIELD\\0" + the field's canonical JSON: interviews started before
    the key store and the MAC had one module still check intact."""
    message = b"kata-interview\0" + b"0f" * 16 + b"\0settings\0" + _canonical(SETTINGS)
    before = hmac.new(KEY, message, hashlib.sha256).hexdigest()
    assert seal.mac(KEY, "0f" * 16, "settings", SETTINGS) == before
    assert before == "aceaeb4743791b79844df451f3163a6a0bc8c3100a8aacd1508342e38a04ce55"


def test_a_seal_made_for_grades_does_not_check_for_an_interview_field():
    value = ["kv_cache", TASKS]
    made = hmac_key.mac(KEY, vouch.LABELS, value)
    assert hmac_key.checks(KEY, vouch.LABELS, value, made)
    assert not hmac_key.checks(KEY, ("kata-interview", "0f" * 16, "settings"), value, made)
    assert not hmac_key.checks(bytes(32), vouch.LABELS, value, made)


@pytest.mark.parametrize("read", [None, 7, ["x"], {"mac": "x"}])
def test_a_seal_that_is_not_a_string_checks_for_nothing(read):
    assert not hmac_key.checks(KEY, vouch.LABELS, ["kv_cache", TASKS], read)


def test_a_key_is_made_once_owner_only_and_read_back(tmp_path):
    store = KeyStore("KATA_TEST_KEY", "test.key", "test key")
    path = tmp_path / "keys" / "test.key"
    key = store.make(path)
    assert len(key) == hmac_key.KEY_BYTES and store.make(path) == key and store.read(path) == (key, "")
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(path.parent).st_mode & 0o777 == 0o700


def test_a_key_others_can_read_is_refused_with_the_command_that_mends_it(tmp_path):
    store = KeyStore("KATA_TEST_KEY", "test.key", "test key")
    path = tmp_path / "test.key"
    store.make(path)
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match=f"not a file only its owner can read .*; chmod 600 {path}"):
        store.make(path)


def test_a_missing_or_short_key_says_which_key_and_why(tmp_path):
    store = KeyStore("KATA_TEST_KEY", "test.key", "interview key", "it was deleted")
    assert store.read(tmp_path / "gone.key") == (None, f"no interview key at {tmp_path / 'gone.key'} (it was deleted)")
    short = tmp_path / "short.key"
    short.write_text("abcd\n")
    short.chmod(0o600)
    assert store.read(short) == (None, f"{short} does not hold an interview key (64 hex digits)")


def test_the_key_file_is_the_variable_s_else_one_under_the_state_folder(tmp_path, monkeypatch):
    store = KeyStore("KATA_TEST_KEY", "test.key", "test key")
    monkeypatch.delenv("KATA_TEST_KEY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert store.path() == tmp_path / "state" / "kata" / "test.key"
    monkeypatch.setenv("KATA_TEST_KEY", str(tmp_path / "mine.key"))
    assert store.path() == tmp_path / "mine.key"


def test_an_interview_key_that_cannot_be_used_is_an_interview_error_saying_so(tmp_path):
    path = tmp_path / "interview.key"
    path.write_text("not hex\n")
    path.chmod(0o600)
    with pytest.raises(seal.InterviewError, match=f"cannot seal the interview: {path} does not hold an interview key"):
        seal.make_key(path)


def test_a_key_made_at_the_same_moment_as_another_is_read_whole_by_both(tmp_path, monkeypatch):
    """A second `kata` making the key while the first is writing it (here: while the first draws its bytes)
    finds no key or a whole one, never a file still empty: both end with the one key that got there first."""
    store = KeyStore("KATA_TEST_KEY", "test.key", "test key")
    path = tmp_path / "test.key"
    draw, theirs = hmac_key.secrets.token_hex, []

    def drawn_while_another_starts(n):
        if n == hmac_key.KEY_BYTES and not theirs:
            theirs.append(None)
            theirs[0] = store.make(path)  # the other process, between this one's start and its write
        return draw(n)

    monkeypatch.setattr(hmac_key.secrets, "token_hex", drawn_while_another_starts)
    mine = store.make(path)
    assert theirs[0] == mine == store.read(path)[0]
    assert [p.name for p in tmp_path.iterdir()] == ["test.key"]  # no draft left beside it


def test_a_key_is_made_where_the_filesystem_makes_no_hard_links(tmp_path, monkeypatch):
    def no_links(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(hmac_key.os, "link", no_links)
    store = KeyStore("KATA_TEST_KEY", "test.key", "test key")
    key = store.make(tmp_path / "test.key")
    assert store.read(tmp_path / "test.key") == (key, "") and [p.name for p in tmp_path.iterdir()] == ["test.key"]
