"""The Telegram channel, one package: `events` holds the pure translations (update ->
`Inbound`, reply -> chunks), `channel` the I/O class around python-telegram-bot's `Bot`.
Only this package's own modules import each other; no other channel is imported."""

from .channel import TelegramChannel

__all__ = ["TelegramChannel"]
