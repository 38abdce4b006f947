"""`kata play --web` end to end: a real `kata` process serving the widgets, headless Chromium (Debian's
`chromium` package) playing each page to its end state, Ctrl-C stopping the server; and
grader.notebook's widget in a real Jupyter kernel (nbclient). A screenshot of each page is kept under
the test's tmp_path (pytest's basetemp), never in the repository."""

from __future__ import annotations

import html
import http.client
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from grader.learn import web_runs
from reference.lm import CachedLM, generate, shipped_model
from reference.tokenizer import decode, encode

from chromium import Browser, available
from helpers import spawn, wait_for_processes

ROOT = Path(__file__).resolve().parents[2]
TEACHER = shipped_model("teacher")
pytestmark = [
    pytest.mark.slow,  # real processes: a server, a browser, a kernel
    pytest.mark.skipif(TEACHER is None, reason="the shipped weights are missing"),
]
needs_chromium = pytest.mark.skipif(not available(), reason="needs Debian's chromium (apt-get install -y chromium)")
DONE = "['done', 'error'].includes(document.getElementById('kata')?.dataset.state)"
PAGE_OPTIONS = {"cache": "", "quantize": "", "speculate": "&n=16", "stack": "&n=16&rounds=1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path: Path, target: str) -> tuple[subprocess.Popen, str, Path]:
    """`kata play --web --no-browser --port N --target target` started, once it printed its URL: (the
    process, the URL, the TMPDIR its jails live under)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "KATA_STATE_DIR": str(tmp_path / "state")}
    env["KATA_WORKDIR"] = str(tmp_path)
    port = _free_port()
    cmd = [sys.executable, "-m", "grader.cli", "play", "--web", "--no-browser", "--port", str(port), "--target", target]
    child = spawn(cmd, tmp_path, env)
    said: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [said.put(line) for line in child.stdout], daemon=True).start()
    deadline, lines = time.monotonic() + 30, []
    while time.monotonic() < deadline:
        try:
            lines.append(said.get(timeout=1))
        except queue.Empty:
            continue
        if lines[-1].startswith("http"):
            url = lines[-1].strip()
            assert url.startswith(f"http://127.0.0.1:{port}/?token="), lines
            return child, url, scratch
    child.kill()
    raise AssertionError(f"kata play --web printed no URL: {lines}")


def _stop(child: subprocess.Popen) -> str:
    """Ctrl-C: the server ends within 10 s with exit code 0 and no traceback; what it said on stderr."""
    child.send_signal(signal.SIGINT)
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        raise AssertionError("kata play --web did not end within 10 s of Ctrl-C") from None
    err = child.stderr.read()
    assert child.returncode == 0 and "Traceback" not in err, err
    return err


def _api(url: str, widget: str, query: str) -> dict:
    base, token = url.split("/?token=")
    with urllib.request.urlopen(f"{base}/api/{widget}?token={token}{query}", timeout=120) as response:
        return json.load(response)


def _chips(browser: Browser) -> list[tuple[int, int, str]]:
    return [
        tuple(x)
        for x in browser.evaluate(
            "[...document.querySelectorAll('.rounds [data-chip]')]"
            ".map(c => [Number(c.dataset.round), Number(c.dataset.index), c.dataset.chip])"
        )
    ]


def _expected_chips(run: dict) -> list[tuple[int, int, str]]:
    """Each drafted token's chip at the end: kept before the first refused guess, corrected at it, draft after."""
    out = []
    for number, r in enumerate(run["rounds"]):
        for i in range(len(r["drafts"])):
            state = "kept" if i < r["kept"] else "corrected" if i == r["kept"] else "draft"
            out.append((number, i, state))
    return out


def _check_end_state(browser: Browser, widget: str, url: str) -> None:
    """What each widget's page shows once it played to its end."""
    if widget == "speculate":
        run = _api(url, "speculate", PAGE_OPTIONS["speculate"])
        assert _chips(browser) == _expected_chips(run)
        shown = browser.evaluate("document.querySelector('.stage .text').textContent")
        assert shown == "Return the " + decode(run["tokens"])
        assert run["tokens"] == generate(CachedLM(TEACHER), encode("Return the "), 16)
        assert browser.evaluate("document.querySelector('[data-same]').dataset.same") == "yes"
    elif widget == "cache":
        assert browser.evaluate("document.querySelector('[data-ratio]').dataset.ratio") == "1/5"
        assert browser.evaluate("document.querySelectorAll('.bar').length") == 18
    elif widget == "quantize":
        assert browser.evaluate("document.getElementById('kata').dataset.bits") == "2"
        assert browser.evaluate("document.querySelectorAll('circle.marker').length") == 32
        assert (
            browser.evaluate(
                "new Set([...document.querySelectorAll('circle.marker')].map(m => m.dataset.snapped)).size"
            )
            <= 3
        )
    elif widget == "stack":
        rows = browser.evaluate("[...document.querySelectorAll('[data-row]')].map(r => r.dataset.row)")
        assert len(rows) == 4 and rows[0] == "re-read everything" and rows[-1].startswith("+ speculative")
        assert browser.evaluate("document.querySelector('[data-kept]').dataset.kept") == "yes"


@needs_chromium
def test_each_widget_plays_to_its_end_state_in_chromium_and_ctrl_c_stops_the_server(tmp_path):
    child, url, _ = _serve(tmp_path, "reference")
    base, token = url.split("/?token=")
    try:
        with urllib.request.urlopen(url, timeout=30) as index:
            assert index.status == 200
        for path in ("/", "/speculate", f"/api/speculate?token={token[:-2]}"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(base + path, timeout=30)
            assert refused.value.code == 403
        with Browser() as browser:
            assert browser.open(url, DONE, 30)
            links = browser.evaluate("[...document.querySelectorAll('[data-widget-link]')].map(a => a.href)")
            assert links == [f"{base}/{w}?token={token}" for w in web_runs.WIDGETS]
            for widget in web_runs.WIDGETS:
                browser.events.clear()
                assert browser.open(f"{base}/{widget}?token={token}&autoplay=1{PAGE_OPTIONS[widget]}", DONE, 180)
                browser.screenshot(tmp_path / f"{widget}.png")
                assert browser.evaluate("document.getElementById('kata').dataset.state") == "done", widget
                assert browser.console_errors() == [], widget
                assert "Traceback" not in browser.dom()
                _check_end_state(browser, widget, url)
            browser.call("Emulation.setEmulatedMedia", features=[{"name": "prefers-reduced-motion", "value": "reduce"}])
            assert browser.open(f"{base}/speculate?token={token}&autoplay=1&n=16", DONE, 60)
            assert browser.evaluate("Kata.reducedMotion") is True  # no sweep, no fade: each step drawn at once
            assert browser.evaluate("getComputedStyle(document.querySelector('.chip')).transitionDuration") == "0s"
            assert _chips(browser) == _expected_chips(_api(url, "speculate", "&n=16"))
    finally:
        err = _stop(child)
    assert "stopped" in err


@needs_chromium
def test_a_stub_behind_a_widget_says_in_the_page_which_task_to_finish(tmp_path):
    folder = tmp_path / "stubs"
    folder.mkdir()
    shutil.copy(ROOT / "katas" / "speculative.py", folder)  # the untouched stub
    child, url, _ = _serve(tmp_path, str(folder))
    base, token = url.split("/?token=")
    try:
        with Browser() as browser:
            assert browser.open(f"{base}/speculate?token={token}&autoplay=1", DONE, 120)
            browser.screenshot(tmp_path / "speculate-stub.png")
            assert browser.evaluate("document.getElementById('kata').dataset.state") == "error"
            assert browser.evaluate("document.getElementById('kata').dataset.finish") == "speculative:greedy"
            said = browser.evaluate("document.querySelector('.problem').innerText")
            assert "Finish task greedy of speculative" in said and "kata grade speculative:greedy" in said
            assert "Traceback" not in browser.dom() and browser.console_errors() == []
    finally:
        _stop(child)


def test_ctrl_c_while_kata_code_hangs_stops_the_server_and_leaves_no_jail_behind(tmp_path):
    folder = tmp_path / "hangs"
    folder.mkdir()
    (folder / "speculative.py").write_text("def greedy_accept(d, t):\n    while True:\n        pass\n")
    child, url, scratch = _serve(tmp_path, str(folder))
    asking = threading.Thread(target=lambda: _ignore_errors(_api, url, "speculate", "&n=4"), daemon=True)
    asking.start()
    assert wait_for_processes(scratch, present=True, seconds=30), "the run started no jail"
    time.sleep(1)  # inside the hanging call
    _stop(child)
    assert not wait_for_processes(scratch, present=False, seconds=5), "a jail outlived the server"


def _ignore_errors(fn, *args) -> None:
    """fn(*args), whose server may be stopped while it answers: a refused or cut connection, or an answer
    cut short (http.client.IncompleteRead), is what the test expects of it."""
    try:
        fn(*args)
    except (OSError, http.client.HTTPException):
        pass


def test_the_notebook_call_in_a_real_kernel_displays_the_widget_with_its_run(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    notebook = nbformat.v4.new_notebook()
    code = 'from grader.notebook import play\nplay("speculate", target="reference", n=12)'
    notebook.cells.append(nbformat.v4.new_code_cell(code))
    nbclient.NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    (shown,) = [o for o in notebook.cells[0].outputs if o.output_type == "display_data"]
    markup = shown["data"]["text/html"]
    assert markup.startswith('<div class="kata-play" data-widget="speculate"><iframe ')
    page = html.unescape(markup.split('srcdoc="', 1)[1].rsplit('"></iframe>', 1)[0])
    config = json.loads(page.split('<script type="application/json" id="kata-config">', 1)[1].split("</script>")[0])
    run = config["run"]
    assert run["tokens"] == generate(CachedLM(TEACHER), encode("Return the "), 12) and run["same"] is True
    assert 'data-widget="speculate"' in page and "Kata.widget(" in page
    if available():  # the displayed HTML plays in a browser as it is, with no server
        (tmp_path / "notebook.html").write_text(markup, encoding="utf-8")
        with Browser() as browser:
            frame = "document.querySelector('iframe').contentDocument"
            assert browser.open(
                (tmp_path / "notebook.html").as_uri(), f"{frame}?.getElementById('kata')?.dataset.state === 'done'", 60
            )
            chips = browser.evaluate(f"[...{frame}.querySelectorAll('.rounds [data-chip]')].map(c => c.dataset.chip)")
            assert chips == [state for _, _, state in _expected_chips(run)]
            assert browser.console_errors() == []
