"""`kata play --web`: the widgets of grader.learn.web_runs as pages, served on 127.0.0.1 only.

The pages are plain HTML, CSS and JavaScript (web_files/, package data: no build step, nothing fetched
from elsewhere), put together by `page`, which grader.notebook uses too, with the run embedded instead of
a server to ask. The server (the standard library's ThreadingHTTPServer) answers a request only when it
carries the random token of the URL it printed (query parameter `token`) and names this host: anything
else gets 403. Pages ask `GET /api/WIDGET` for their run; the server runs it as `kata play` does (kata
code in its jail, never in this process), one run at a time, since the jails of a run are the process's
own (grader.learn.play_jails.jails stops them all when the run ends).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import sys
import threading
from functools import lru_cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qs, urlsplit

from grader.jailer import jail_client
from grader.learn import web_runs

HOST = "127.0.0.1"  # the only address the server binds: the learner's own machine
TITLES = {
    "cache": "Remember it: the KV cache",
    "quantize": "Fewer bits: quantization",
    "speculate": "Guess, then check: speculative decoding",
    "stack": "The stack of small bargains",
}
# Each page's own script in web_files/, after kata.js: named for what the widget shows (the bits of a
# weight, the draft's guesses), so that no file but a kata's own is named after a kata.
SCRIPTS = {None: "index.js", "cache": "cache.js", "quantize": "bits.js", "speculate": "draft.js", "stack": "stack.js"}
_SHARED_QUERY = ("token", "autoplay", "stream")  # what a URL may carry beside a widget's own options


@lru_cache(maxsize=None)
def _file(name: str) -> str:
    return resources.files("grader.learn").joinpath("web_files", name).read_text(encoding="utf-8")


def _script_json(value) -> str:
    """value as JSON safe inside a <script> element (no '<' to end it early)."""
    return json.dumps(value, default=web_runs.jsonable, ensure_ascii=False).replace("<", "\\u003c")


def _fill(template: str, fields: dict[str, str]) -> str:
    """template with each @@NAME@@ replaced by fields[NAME], in one pass (what is put in is not read again)."""
    return re.sub(r"@@([A-Z]+)@@", lambda m: fields[m.group(1)], template)


def page(widget: str | None, run: dict | None = None, autoplay: bool = False) -> str:
    """The HTML page of widget (None: the index of the widgets), CSS and JavaScript inline. With run (a
    merged run of grader.learn.web_runs), the page draws that run and asks no server; else it asks
    /api/WIDGET on the server it came from, with the token of its own URL."""
    if widget is not None and widget not in TITLES:
        raise ValueError(f"there is no widget {widget!r}; there are {', '.join(TITLES)}")
    params = {}
    if widget is not None:
        params = {
            name: {"default": p.default, "low": p.low, "high": p.high, "help": p.help}
            for name, p in web_runs.PARAMS[widget].items()
        }
    config = {"widget": widget, "run": run, "autoplay": autoplay, "params": params, "titles": TITLES}
    return _fill(
        _file("page.html"),
        {
            "TITLE": TITLES.get(widget, "LLM speed katas: play"),
            "WIDGET": widget or "index",
            "STYLE": _file("kata.css"),
            "CONFIG": _script_json(config),
            "SCRIPT": _file("kata.js") + "\n" + _file(SCRIPTS[widget]),
        },
    )


class WebServer(ThreadingHTTPServer):
    """The server of `kata play --web`, bound to HOST; its URL carries its token."""

    daemon_threads = True  # a request still running when the server stops does not hold the process

    def __init__(self, target: str, port: int):
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in [0, 65535] (0: a free one), got {port!r}")
        super().__init__((HOST, port), _Handler)
        self.target = target
        self.token = secrets.token_urlsafe(24)
        self.one_run = threading.Lock()  # the jails of a run are the process's own: one run at a time
        self.closing = False

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={self.token}"

    def hosts(self) -> set[str]:
        """The Host headers a request to this server may carry (another name is a page elsewhere)."""
        return {f"{HOST}:{self.port}", f"localhost:{self.port}"}

    def handle_error(self, request, client_address) -> None:
        """A request that failed: one line on stderr, none once the server is closing (a run cut short by
        close() fails as its jails go)."""
        if not self.closing:
            kind, exc, _ = sys.exc_info()
            print(f"kata play --web: a request failed: {kind.__name__}: {exc}", file=sys.stderr)

    def close(self) -> None:
        """Stop listening and stop the jails of a run still going (whose thread, woken by its jail's end, may
        stop them too: a jail's stop is safe from two threads)."""
        self.closing = True
        self.server_close()
        jail_client.stop_all()


class _Handler(BaseHTTPRequestHandler):
    server: WebServer
    server_version = "kata-play"

    def log_message(self, format, *args) -> None:  # noqa: A002  (the base class's name) the CLI prints the URL alone
        pass

    def do_GET(self) -> None:  # noqa: N802  (the base class's name)
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if not self._allowed(query.get("token", "")):
            return self._send(HTTPStatus.FORBIDDEN, "text/plain", "refused: open the URL kata play --web printed\n")
        path = parts.path.rstrip("/") or "/"
        flags = [f"{name}={query[name]}" for name in ("autoplay", "stream") if query.get(name, "0") not in ("0", "1")]
        if flags:
            said = f"{', '.join(flags)}: autoplay and stream are 0 or 1"
            if path.startswith("/api/"):  # as every refusal of the API: JSON
                return self._send(HTTPStatus.BAD_REQUEST, "application/json", json.dumps({"error": said}))
            return self._send(HTTPStatus.BAD_REQUEST, "text/plain", said + "\n")
        if path == "/":
            return self._send(HTTPStatus.OK, "text/html", page(None))
        if path.lstrip("/") in TITLES:
            return self._send(HTTPStatus.OK, "text/html", page(path.lstrip("/"), autoplay=query.get("autoplay") == "1"))
        if path.startswith("/api/"):
            return self._api(path[len("/api/") :], query)
        return self._send(HTTPStatus.NOT_FOUND, "text/plain", f"nothing at {path}; try / for the widgets\n")

    def _not_allowed(self) -> None:
        """Any method but GET: 405, in a line (BaseHTTPRequestHandler answers 501 with an HTML page)."""
        body = b"only GET: open the URL kata play --web printed\n"
        self._head(HTTPStatus.METHOD_NOT_ALLOWED, "text/plain", len(body), allow="GET")
        if self.command != "HEAD":
            self.wfile.write(body)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _not_allowed  # noqa: N815

    def _allowed(self, token: str) -> bool:
        """Whether the request carries this server's token and names this host."""
        host_ok = self.headers.get("Host", "").lower() in self.server.hosts()  # host names ignore case
        return host_ok and hmac.compare_digest(token.encode(), self.server.token.encode())

    def _api(self, widget: str, query: dict[str, str]) -> None:
        """The widget's run as one JSON object, or with stream=1 as its parts, one JSON line each, as they come."""
        try:
            opts = web_runs.options(widget, {k: v for k, v in query.items() if k not in _SHARED_QUERY})
        except web_runs.ParamError as exc:
            return self._send(HTTPStatus.BAD_REQUEST, "application/json", json.dumps({"error": str(exc)}))
        with self.server.one_run:
            parts = web_runs.stream(widget, opts, self.server.target)
            if query.get("stream") != "1":
                return self._send(HTTPStatus.OK, "application/json", _script_json(web_runs.merge(parts)))
            self._head(HTTPStatus.OK, "application/x-ndjson")
            try:
                for part in parts:
                    self.wfile.write((_script_json(part) + "\n").encode())
                    self.wfile.flush()
            except OSError:  # the page went away: the run stops with its stream
                parts.close()

    def _head(self, status: HTTPStatus, kind: str, length: int | None = None, allow: str = "") -> None:
        self.send_response(status)
        if allow:
            self.send_header("Allow", allow)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'none'; connect-src 'self'; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:",
        )
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def _send(self, status: HTTPStatus, kind: str, text: str) -> None:
        body = text.encode()
        self._head(status, kind, len(body))
        self.wfile.write(body)


def start(target: str = "katas", port: int = 0) -> WebServer:
    """A WebServer for target's code, listening on HOST at port (0: a free one) until its serve_forever()
    ends and it is close()d. An OSError when the port cannot be had."""
    return WebServer(target, port)
