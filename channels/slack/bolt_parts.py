"""Two adjustments to slack-bolt, kept out of the channel class: its logger without a warning
that does not apply to us, and Socket Mode with the payload check the HTTP route has."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from .verify import Rejected, check_envelope_payload

log = logging.getLogger(__name__)


def bolt_logger() -> logging.Logger:
    """Bolt's logger, without its warning that the token is unused beside our client: Bolt
    reads SLACK_BOT_TOKEN from the environment itself, where our secrets are, and said so at
    every start although nothing is wrong."""
    logger = logging.getLogger("slack_bolt.iris")
    if not any(isinstance(f, _TokenNote) for f in logger.filters):
        logger.addFilter(_TokenNote())
    return logger


class _TokenNote(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "`token` will be unused" not in record.getMessage()


class CheckedSocketHandler(AsyncSocketModeHandler):
    """Socket Mode with the HTTP route's payload check: an envelope Bolt would fail on is
    acked and dropped with one log line, not left unacked (Slack would deliver it again on
    every reconnect, each time with a traceback)."""

    async def handle(self, socket: Any, req: SocketModeRequest) -> None:
        try:
            check_envelope_payload(req.payload)
        except Rejected as exc:
            log.warning("slack: malformed Socket Mode envelope (%s); acked, dropped", exc.reason)
            await socket.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        await super().handle(socket, req)
