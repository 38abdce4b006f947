"""A secret key of this account, and the HMAC it seals what the grader keeps with.

Two rooms seal what they write: grader.learn.vouch the passes a grade recorded
(seals.json), grader.interview.seal an interview's settings and log. Each keeps
a key of its own (a KeyStore: 32 random bytes as hex in a file of mode 0600, in
a folder of mode 0700, under $XDG_STATE_HOME/kata or ~/.local/state/kata unless
its variable names another file), and each MAC covers labels of its own before
the value, so a MAC made for one never checks for the other.

It sits in output/, the room right below learn, interview and instructor (which
import none of each other): output/ is where the grader writes what it keeps,
and a seal is how it trusts later what it wrote.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

KEY_BYTES = 32


class KeyFileError(ValueError):
    """A key that cannot be made or used; the message says why, and what to do when something can be done."""


@dataclass(frozen=True)
class KeyStore:
    """Where one kind of key of this account lives, and the words its messages name it with."""

    env: str  # the variable that names the key file instead of the default ($KATA_INTERVIEW_KEY)
    name: str  # the file's name in kata/ under $XDG_STATE_HOME or ~/.local/state
    what: str  # the key in messages: "interview key"
    missing: str = ""  # why there may be no key, said after "no KEY at PATH"; "" says nothing

    def path(self) -> Path:
        """Where the key lives: $env, else kata/NAME under $XDG_STATE_HOME or ~/.local/state."""
        if os.environ.get(self.env):
            return Path(os.environ[self.env]).expanduser().absolute()
        state_home = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
        return Path(state_home).expanduser().absolute() / "kata" / self.name

    def read(self, path: Path) -> tuple[bytes | None, str]:
        """(the key, "") from the file at path, or (None, why it cannot be used)."""
        try:
            info = path.stat()
            text = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None, f"no {self.what} at {path}" + (f" ({self.missing})" if self.missing else "")
        except (OSError, UnicodeError) as exc:
            return None, f"the {self.what} {path} cannot be read ({exc})"
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            return None, (
                f"the {self.what} {path} is not a file only its owner can read (mode {stat.filemode(info.st_mode)}); "
                f"chmod 600 {path}"
            )
        try:
            key = bytes.fromhex(text)
        except ValueError:
            key = b""
        if len(key) != KEY_BYTES:
            article = "an" if self.what[:1] in "aeiou" else "a"
            return None, f"{path} does not hold {article} {self.what} ({KEY_BYTES * 2} hex digits)"
        return key, ""

    def make(self, path: Path) -> bytes:
        """The key at path, made first (mode 0600, its folder 0700) if there is none; a KeyFileError saying why
        if the file there cannot be used (an OSError if its folder cannot be made).

        A new key is written whole to a file of its own beside path and then linked to path, which fails if a
        key is there already: a `kata` started at the same moment reads either no key or a whole one, never
        the empty file that creating path first and writing it second showed it (it then found no key in it,
        and a grade's passes went unsealed)."""
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists():
            _link_new_key(path)
        key, problem = self.read(path)
        if key is None:
            raise KeyFileError(problem)
        return key


def _link_new_key(path: Path) -> None:
    """A new key at path, unless one got there first (made by one starting at the same moment). Where the
    filesystem makes no hard links, the key is written in place instead (as the key of a kata before this was)."""
    text = secrets.token_hex(KEY_BYTES) + "\n"
    draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    try:
        _write_new(draft, text)
        os.link(draft, path)
    except FileExistsError:
        pass
    except OSError:
        _write_new(path, text, exist_ok=True)
    finally:
        draft.unlink(missing_ok=True)


def _write_new(path: Path, text: str, exist_ok: bool = False) -> None:
    """text in a new file at path, mode 0600, never through a link; nothing if exist_ok and a file is there."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        if exist_ok:
            return
        raise
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)


def canonical_json(value) -> str:
    """value (anything JSON can write) as the one text its MAC covers: keys sorted, no spaces, ASCII only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def mac(key: bytes, labels: tuple[str, ...], value) -> str:
    """The HMAC-SHA256 (hex) of value's canonical JSON after labels, each ended by a NUL: the labels say
    what the value is (whose seal, which interview, which field), so a MAC copied to another use does not check.
    A UnicodeEncodeError (a ValueError) if a label is not ASCII."""
    message = "\0".join((*labels, canonical_json(value))).encode("ascii")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def checks(key: bytes, labels: tuple[str, ...], value, seal: object) -> bool:
    """Whether seal (as read: anything) is value's MAC under key and labels, compared in constant time."""
    return isinstance(seal, str) and hmac.compare_digest(seal, mac(key, labels, value))
