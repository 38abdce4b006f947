"""`kata play --web` and grader.notebook: the widgets' runs as data, checked against figures this file
computes on its own from the shipped models, and the server that serves them, checked over real HTTP
(the browser itself: tests/learn/test_web_browser.py, slow)."""

from __future__ import annotations

import html
import inspect
import json
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.learn import play_stack, web, web_runs
from grader.notebook import widget_html
from reference.lm import CachedLM, generate, shipped_model
from reference.sampling import generate_naive
from reference.tokenizer import decode, encode

TEACHER = shipped_model("teacher")
DRAFT = shipped_model("draft")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(TEACHER is None or DRAFT is None, reason="the shipped weights are missing")


@pytest.fixture()
def isolated(tmp_path, monkeypatch):
    """This test's own grade state and kata folder (nothing passes there)."""
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path / "katas"))
    (tmp_path / "katas").mkdir()
    return tmp_path


@pytest.fixture()
def server(isolated):
    """A `kata play --web` server on the reference solutions, serving in a thread of this process."""
    running = web.start("reference", 0)
    # shutdown() waits for serve_forever's next look at its flag: every 0.05 s here, not the default 0.5 s
    thread = threading.Thread(target=running.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield running
    running.shutdown()
    running.close()
    thread.join(timeout=5)


def _get(server: web.WebServer, path: str, host: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{web.HOST}:{server.port}{path}")
    if host is not None:
        request.add_header("Host", host)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _run(widget: str, target: str = "reference", **query) -> dict:
    return web_runs.run(widget, web_runs.options(widget, {k: str(v) for k, v in query.items()}), target)


# ------------------------------------------------------------------ the server


@pytest.mark.parametrize("path", ["/", "/speculate", "/cache", "/api/cache", "/api/speculate?stream=1", "/nowhere"])
def test_a_request_without_the_right_token_is_refused(server, path):
    joiner = "&" if "?" in path else "?"
    assert _get(server, path)[0] == 403
    assert _get(server, f"{path}{joiner}token=")[0] == 403
    wrong = server.token[:-1] + ("y" if server.token.endswith("x") else "x")  # one character off
    assert _get(server, f"{path}{joiner}token={wrong}")[0] == 403
    assert _get(server, f"{path}{joiner}token={server.token}")[0] in (200, 404)


def test_a_request_naming_another_host_is_refused_even_with_the_token(server):
    """A page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding) names its own host."""
    assert _get(server, f"/?token={server.token}", host=f"evil.example:{server.port}")[0] == 403
    assert _get(server, f"/?token={server.token}", host=f"localhost:{server.port}")[0] == 200
    assert _get(server, f"/?token={server.token}", host=f"LocalHost:{server.port}")[0] == 200  # names ignore case


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "HEAD"])
def test_any_method_but_get_is_refused_with_405_in_a_line(server, method):
    request = urllib.request.Request(f"{server.url}", method=method, data=b"x" if method in ("POST", "PUT") else None)
    with pytest.raises(urllib.error.HTTPError) as info:  # 501 and an HTML page before
        urllib.request.urlopen(request, timeout=60)
    assert info.value.code == 405 and info.value.headers["Allow"] == "GET"
    assert info.value.headers["X-Content-Type-Options"] == "nosniff"
    assert info.value.read() == (b"" if method == "HEAD" else b"only GET: open the URL kata play --web printed\n")


def test_the_server_listens_on_127_0_0_1_and_nothing_binds_it_elsewhere(server):
    assert server.server_address[0] == "127.0.0.1" and server.url.startswith(f"http://127.0.0.1:{server.port}/?token=")
    assert list(inspect.signature(web.start).parameters) == ["target", "port"]
    assert list(inspect.signature(web.WebServer).parameters) == ["target", "port"]
    helped = CliRunner().invoke(main, ["play", "--help"]).output
    assert "--web" in helped and "127.0.0.1" in helped
    assert not any(word in helped for word in ("--host", "--bind", "--address", "0.0.0.0"))
    for option in ("--host", "--bind", "--address"):
        refused = CliRunner().invoke(main, ["play", "--web", "--no-browser", option, "0.0.0.0"])
        assert refused.exit_code == 2 and "No such option" in refused.output, refused.output


def test_each_token_is_new_and_long(isolated):
    first, second = web.start("reference", 0), web.start("reference", 0)
    try:
        assert first.token != second.token and len(first.token) >= 32 and first.port != second.port
    finally:
        first.close()
        second.close()


def test_the_index_and_each_widget_page_are_served_with_their_script_and_nothing_from_elsewhere(server):
    status, index = _get(server, f"/?token={server.token}")
    assert status == 200 and 'data-widget="index"' in index
    for widget in web_runs.WIDGETS:
        status, page = _get(server, f"/{widget}?token={server.token}")
        assert status == 200 and f'data-widget="{widget}"' in page and "Kata.widget(" in page
        assert not any(f"{attr}={q}http" in page for attr in ("src", "href") for q in "\"'"), "no CDN: offline"
        assert "<script src" not in page and "@import" not in page and "url(http" not in page


def test_the_api_gives_the_whole_run_or_its_parts_one_json_line_each(server):
    status, whole = _get(server, f"/api/speculate?token={server.token}&n=12&k=3")
    assert status == 200
    status, lines = _get(server, f"/api/speculate?token={server.token}&n=12&k=3&stream=1")
    parts = [json.loads(line) for line in lines.splitlines()]
    assert status == 200 and len(parts) > 1 and web_runs.merge(parts) == json.loads(whole)


def test_the_api_refuses_an_option_its_widget_does_not_take_naming_what_it_takes(server):
    status, said = _get(server, f"/api/speculate?token={server.token}&k=99")
    assert status == 400 and json.loads(said)["error"] == "k (draft guesses per round) must be a whole number in [1, 8]"
    status, said = _get(server, f"/api/cache?token={server.token}&bits=3")
    assert status == 400 and json.loads(said)["error"] == "the cache widget takes prompt, n, not bits"
    status, said = _get(server, f"/api/moe?token={server.token}")
    assert status == 400 and "there is no widget 'moe'; there are cache, quantize, speculate, stack" in said


@pytest.mark.parametrize(
    "value", ["%C2%B2", "%D9%A3", "%EF%BC%95", "-3", "3.0"], ids=["superscript", "arabic", "wide", "neg", "float"]
)
def test_a_whole_number_option_takes_ascii_digits_alone(server, value):
    # "²" passed isdigit() and int() refused it: the server dropped the connection; "٣" and "５" were read as 3 and 5
    status, said = _get(server, f"/api/cache?token={server.token}&n={value}")
    assert status == 400 and json.loads(said)["error"].startswith("n (")


@pytest.mark.parametrize("flag", ["stream=2", "autoplay=x"])
def test_autoplay_and_stream_are_0_or_1(server, flag):
    said = f"{flag}: autoplay and stream are 0 or 1"
    assert _get(server, f"/cache?token={server.token}&{flag}") == (400, said + "\n")
    assert _get(server, f"/api/cache?token={server.token}&{flag}") == (400, json.dumps({"error": said}))


# ------------------------------------------------------------------ the runs


def _rounds_by_the_rule(prompt: list[int], n: int, k: int) -> list[tuple[list[int], int]]:
    """(the draft's guesses, how many the teacher keeps) of each round, from both models' own greedy text."""
    own = generate(CachedLM(TEACHER), prompt, n)
    seq, done, out = list(prompt), 0, []
    while done < n:
        k_round = min(k, n - done - 1)
        guesses = generate(CachedLM(DRAFT), seq, k_round) if k_round else []
        kept = next((i for i, (g, t) in enumerate(zip(guesses, own[done:])) if g != t), k_round)
        out.append((guesses, kept))
        seq += own[done : done + kept + 1]
        done += kept + 1
    return out


def test_the_speculate_run_is_the_targets_own_text_in_rounds_of_kept_guesses_and_one_target_token(isolated):
    n, k, prompt = 24, 3, "Return the "
    run = _run("speculate", n=n, k=k, prompt=prompt)
    own = generate(CachedLM(TEACHER), encode(prompt), n)
    assert run["tokens"] == own and run["target_tokens"] == own and run["same"] is True
    assert [(r["drafts"], r["kept"]) for r in run["rounds"]] == _rounds_by_the_rule(encode(prompt), n, k)
    written = []
    for r in run["rounds"]:
        assert 0 <= r["kept"] <= len(r["drafts"]) <= k
        refused = r["kept"] < len(r["drafts"])
        assert (r["correction"] is not None) == refused and (r["bonus"] is not None) == (not refused)
        if refused:
            assert r["correction"] != r["drafts"][r["kept"]]  # a correction replaces a guess the teacher refused
        assert r["emitted"] == r["drafts"][: r["kept"]] + [r["correction"] if refused else r["bonus"]]
        written += r["emitted"]
    assert written == own
    assert (run["target_calls"], run["plain_calls"]) == (len(run["rounds"]), n)
    assert run["draft_calls"] == sum(len(r["drafts"]) for r in run["rounds"])
    assert "".join(run["vocab"][t] for t in own) == decode(own)


def test_the_cache_run_counts_each_tokens_work_with_the_models_own_counter(isolated):
    run = _run("cache", prompt="R", n=9)
    own = generate_naive(TEACHER, encode("R"), 9)
    assert [s["token"] for s in run["naive"]] == own and [s["token"] for s in run["cached"]] == own
    assert [s["work"] for s in run["naive"]] == list(range(1, 10))  # the whole text again for every character
    assert [s["work"] for s in run["cached"]] == [1] * 9
    assert run["ratio"] == [1, 5] and run["same"] is True  # 9 token passes against 45
    with TEACHER.count_work() as work:
        generate_naive(TEACHER, encode("R"), 9)
    assert run["naive"][-1]["macs"] == work.macs


def _grouped_by_the_rule(x: np.ndarray, bits: int) -> np.ndarray:
    qmax = 2 ** (bits - 1) - 1
    g = x.reshape(*x.shape[:-1], -1, 32).astype(np.float64)
    scale = np.abs(g).max(axis=-1, keepdims=True) / qmax
    return (np.round(g / np.where(scale > 0, scale, 1.0)) * scale).reshape(x.shape).astype(np.float32)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@pytest.mark.slow  # the teacher quantized and measured at seven widths: seconds of CPU
def test_the_quantize_run_snaps_a_real_group_of_weights_and_measures_the_teacher_at_each_width(isolated):
    name, index = "layers.1.w_up", 77
    run = _run("quantize", weight=name, index=index)
    flat = np.swapaxes(TEACHER.weights[name], -1, -2).reshape(-1).astype(np.float64)
    group = flat[64:96]
    assert run["first"] == 64 and run["values"] == pytest.approx(group.tolist())
    assert [r["bits"] for r in run["rows"]] == [8, 7, 6, 5, 4, 3, 2]
    held = encode(open(ROOT / "reference" / "data" / "val.txt", encoding="utf-8").read()[:128])
    p_log = _log_softmax(TEACHER.forward(held).astype(np.float64))
    prompt = encode("Return the ")
    assert run["full_text"] == decode(generate(CachedLM(TEACHER), prompt, 24))
    for r in run["rows"]:
        qmax = 2 ** (r["bits"] - 1) - 1
        step = np.abs(group).max() / qmax
        assert len(r["levels"]) == 2 * qmax + 1 and r["levels"][-1] == pytest.approx(np.abs(group).max())
        snapped = np.asarray(r["snapped"])
        assert np.allclose(snapped / step, np.round(snapped / step), atol=1e-4)  # on a level
        assert np.all(np.abs(snapped - group) <= step / 2 + 1e-6)  # the nearest one (either, at a tie)
        if r["bits"] in (8, 2):  # the teacher quantized by the rule, measured here
            quantized = TEACHER.copy()
            for key, w in quantized.weights.items():
                if key.split(".")[-1] in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "router", "out"):
                    rows = np.swapaxes(w, -1, -2)
                    quantized.weights[key] = np.swapaxes(_grouped_by_the_rule(rows, r["bits"]), -1, -2)
            q_log = _log_softmax(quantized.forward(held).astype(np.float64))
            # The reference's quantize_model and this rule may round a tie apart: KL within 5%, top-1 within 2 of 128.
            assert r["kl"] == pytest.approx(np.mean(np.sum(np.exp(p_log) * (p_log - q_log), axis=-1)), rel=0.05)
            assert r["top1"] == pytest.approx(np.mean(p_log.argmax(-1) == q_log.argmax(-1)), abs=2 / 128)
    assert run["rows"][0]["kl"] < run["rows"][-1]["kl"]  # 2 bits moves the teacher further than 8


@pytest.mark.slow  # four ways of serving the teacher, each timed
def test_the_stack_run_streams_each_row_as_it_is_measured_then_whether_the_text_was_kept(isolated):
    parts = web_runs.stream("stack", web_runs.options("stack", {"n": "8", "rounds": "1"}), "reference")
    rows = []
    for part in parts:
        if "row" in part:
            rows.append(part["row"])
        elif "kept" in part:
            assert len(rows) == 4  # the end comes after every row
            assert part["kept"] is True
    assert [r["name"] for r in rows][:3] == ["re-read everything", "+ KV cache", "+ int8 weights (grouped, G=32)"]
    assert rows[-1]["name"].startswith("+ speculative")
    assert rows[0]["speedup"] is None and all(r["speedup"] > 0 for r in rows[1:])
    own = generate_naive(TEACHER, encode(play_stack.PROMPT), 8)
    assert rows[0]["tokens"] == own and rows[1]["text"] == decode(own)
    assert "projection" in rows[2]["note"]


# ------------------------------------------------------------------ whose code


def test_before_its_tasks_pass_a_widget_plays_the_models_own_code_and_says_which_tasks_to_finish(isolated):
    run = _run("speculate", target="katas", n=10)
    (source,) = run["sources"]
    assert source["own"] is True and source["kata"] == "speculative" and source["tasks"] == ["greedy"]
    assert "does not pass yet (kata grade speculative)" in source["says"]
    assert run["tokens"] == generate_naive(TEACHER, encode("Return the "), 10)  # a whole run, labelled


@pytest.mark.parametrize(
    ("widget", "kata", "task", "function"),
    [
        ("speculate", "speculative", "greedy", "greedy_accept"),
        ("cache", "kv_cache", "cache", "KVCache.for_model"),
        ("quantize", "quantization", "grouped", "quantize_grouped"),
    ],
)
def test_a_stub_behind_a_widget_names_the_task_to_finish_without_a_traceback(tmp_path, widget, kata, task, function):
    shutil.copy(ROOT / "katas" / f"{kata}.py", tmp_path / f"{kata}.py")  # the untouched stub
    run = _run(widget, target=str(tmp_path), n=5) if widget != "quantize" else _run(widget, target=str(tmp_path))
    assert run["finish"] == {"kata": kata, "task": task, "function": function, "command": f"kata grade {kata}:{task}"}
    assert "raised NotImplementedError" in run["error"] and "Traceback" not in run["error"]


def test_what_kata_code_raises_ends_the_run_with_one_line_naming_whose_code(tmp_path):
    (tmp_path / "speculative.py").write_text("def greedy_accept(d, t):\n    raise KeyError('\\x1b[2J boom')\n")
    run = _run("speculate", target=str(tmp_path), n=5)
    assert run["finish"] is None and "\x1b" not in run["error"] and "\n" not in run["error"]
    assert run["error"].startswith(f"the one in that folder, {tmp_path / 'speculative.py'} raised KeyError")


def test_a_prompt_the_model_cannot_continue_ends_the_run_with_what_is_allowed(isolated):
    assert _run("cache", prompt="x" * 300)["error"] == (
        "a prompt of 300 characters and 9 new ones do not fit the model's 256: give a prompt of at most 247 characters"
    )
    assert "no quantized weight 'layers.0.attn_norm'" in _run("quantize", weight="layers.0.attn_norm")["error"]


# ------------------------------------------------------------------ the CLI and the notebook


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["play", "--port", "8000"], "--port, --no-browser and a --target before the demo go with --web"),
        (["play", "--web", "cache"], "--web serves every widget; leave out 'cache'"),
        (["play", "--web", "--port", "0"], "0 is not in the range 1<=x<=65535"),
        (["play", "--web", "--target", "/no/such/folder"], "target must be 'katas', 'reference' or a directory"),
    ],
)
def test_kata_play_web_refuses_what_it_cannot_do_with_a_usage_error(isolated, args, said):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output


def test_kata_play_without_web_options_still_writes(isolated):
    result = CliRunner().invoke(main, ["play", "Return", "-n", "3"])
    assert result.exit_code == 0 and result.output.startswith("Return"), result.output


def test_the_notebook_html_is_the_widgets_page_with_its_run_embedded(isolated):
    shown = widget_html("speculate", "reference", n=8)
    assert shown.startswith('<div class="kata-play" data-widget="speculate"><iframe ')
    page = html.unescape(shown.split('srcdoc="', 1)[1].rsplit('"></iframe>', 1)[0])
    config = json.loads(page.split('<script type="application/json" id="kata-config">', 1)[1].split("</script>")[0])
    assert config["widget"] == "speculate" and config["autoplay"] is True
    assert config["run"]["tokens"] == generate_naive(TEACHER, encode("Return the "), 8)
    assert web.page("speculate").split("<script>")[1] == page.split("<script>")[1]  # the same files
    with pytest.raises(ValueError, match="there is no widget 'moe'; there are cache, quantize, speculate, stack"):
        widget_html("moe")
