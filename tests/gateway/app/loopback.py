"""Loopback fakes of the three services `iris init` and `iris doctor --online` call, for
subprocess tests: one HTTP server on 127.0.0.1 answering the Telegram Bot API's `getMe`
(under `/bot<token>/`), Slack's `auth.test` (under `/slack/api/`) and the Anthropic Messages
API (`/v1/messages`). Credentials in `GOOD` are accepted; anything else is rejected the way
each service rejects it (401 / `invalid_auth`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

from tests.fakes import message_body

TELEGRAM_TOKEN = "123456:GOOD-token"
SLACK_BOT = "xoxb-good"
SLACK_APP = "xapp-good"
ANTHROPIC_KEY = "sk-good"
GOOD = {TELEGRAM_TOKEN, SLACK_BOT, ANTHROPIC_KEY}


@dataclass(frozen=True)
class Services:
    root: str
    calls: list[str]

    def env(self) -> dict[str, str]:
        """Environment overrides pointing Iris at these fakes."""
        return {
            "IRIS_TELEGRAM__BASE_URL": f"{self.root}/bot",
            "IRIS_SLACK__API_URL": f"{self.root}/slack/api/",
            "IRIS_LLM__BASE_URL": self.root,
        }


class _Handler(BaseHTTPRequestHandler):
    calls: list[str]

    def _reply(self, status: int, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.calls.append(self.path)
        if self.path.startswith("/bot"):
            token = self.path[len("/bot") :].split("/", 1)[0]
            if token not in GOOD:
                self._reply(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
                return
            me = {"id": 1, "is_bot": True, "first_name": "Iris", "username": "iris_test_bot"}
            self._reply(200, {"ok": True, "result": me})
        elif self.path.startswith("/slack/api/auth.test"):
            sent = dict(parse_qsl(raw.decode())) if raw else {}
            token = (self.headers.get("authorization") or "").removeprefix("Bearer ")
            token = token or sent.get("token", "")
            if token not in GOOD:
                self._reply(200, {"ok": False, "error": "invalid_auth"})
                return
            self._reply(200, {"ok": True, "user_id": "UBOT", "user": "iris", "bot_id": "B1"})
        elif self.path.startswith("/v1/messages"):
            key = (self.headers.get("authorization") or "").removeprefix("Bearer ")
            key = key or self.headers.get("x-api-key", "")
            if key not in GOOD:
                error = {"type": "authentication_error", "message": "invalid x-api-key"}
                self._reply(401, {"type": "error", "error": error})
                return
            self._reply(200, message_body([{"type": "text", "text": "OK"}]))
        else:
            self._reply(404, {"ok": False})

    def log_message(self, *args: object) -> None:
        return None


@contextmanager
def services() -> Iterator[Services]:
    calls: list[str] = []
    handler = type("Handler", (_Handler,), {"calls": calls})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Services(root=f"http://127.0.0.1:{server.server_address[1]}", calls=calls)
    finally:
        server.shutdown()
        server.server_close()
