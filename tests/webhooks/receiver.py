"""A webhook receiver on loopback for the tests: a real HTTP server in a thread that records
every request (headers and raw body) and answers as the test scripts it, and the README's
verification snippet, taken from the README itself so that the documented code is the tested
code."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent.parent / "README.md"
SNIPPET_MARKER = "<!-- webhook-verify-snippet"


def readme_verify_signature() -> Callable[..., bool]:
    """`verify_signature` as the README documents it, executed from the README's text."""
    text = README.read_text()
    after = text[text.index(SNIPPET_MARKER) :]
    code = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    assert code is not None, "the README's verification snippet is missing"
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "README.md#webhook-verify-snippet", "exec"), namespace)  # noqa: S102
    return namespace["verify_signature"]  # type: ignore[no-any-return]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """`answers` is consumed one per request: an int is the status to answer, a float a number
    of seconds to sleep before answering 200 (longer than the time-out: no answer in time);
    when empty, 200."""

    port: int
    received: list[Received] = field(default_factory=list)
    answers: list[int | float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/computeshare?source=test"

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [each.body for each in self.received]


@contextmanager
def receiver_running() -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            receiver = state["receiver"]
            with receiver.lock:
                receiver.received.append(
                    Received(self.path, dict(self.headers.items()), body, time.time())
                )
                answer = receiver.answers.pop(0) if receiver.answers else 200
            if isinstance(answer, float):
                time.sleep(answer)
                answer = 200
            reply = b"x" * 2000 if answer >= 500 else b"ok"
            try:
                self.send_response(answer)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
            except OSError:
                pass  # the platform gave up waiting

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state["receiver"] = Receiver(port=server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["receiver"]
    finally:
        server.shutdown()
        server.server_close()
