"""A loopback Anthropic Messages API for subprocess tests: every call is answered with an echo
of the last user text (`echo: …`), from a thread, so it serves while the test's own loop waits.
For scripted faults use `tests/fakes/anthropic_server.py`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.fakes.llm import message_body


class _EchoMessagesAPI(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        try:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            last = body["messages"][-1]["content"][-1]["text"]
        except (ValueError, KeyError, IndexError, TypeError):  # a client killed mid-request
            self.send_error(400)
            return
        payload = json.dumps(message_body([{"type": "text", "text": f"echo: {last}"}])).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return None


@contextmanager
def echo_model() -> Iterator[str]:
    """The server's base URL (`IRIS_LLM__BASE_URL`) while the block runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoMessagesAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
