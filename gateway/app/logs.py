"""The CLI's logging: one format on stderr; the libraries quieter than Iris, and never with a
traceback (`library_one_line`)."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str, *, quiet: bool = False) -> None:
    logging.basicConfig(
        level=logging.WARNING if quiet else getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in LIBRARIES:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(library_one_line)


# The libraries' loggers: quieter than ours, and never a traceback.
LIBRARIES = ("httpx", "httpx2", "telegram", "slack_bolt", "slack_sdk", "aiohttp.access")


def library_one_line(record: logging.LogRecord) -> bool:
    """A library's record with an exception (python-telegram-bot logs a traceback for each
    failed poll, e.g. a proxy's HTML 502) becomes one line naming the exception; Iris logs
    what the failure means for it on its own line."""
    if record.exc_info and record.name.startswith(LIBRARIES):
        exc = record.exc_info[1]
        if exc is not None:
            said = " ".join(str(exc).split())[:200]
            record.msg, record.args = f"{record.getMessage()} ({type(exc).__name__}: {said})", ()
        record.exc_info, record.exc_text = None, None
    return True
