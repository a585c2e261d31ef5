"""The Slack channel, one package: `events` holds the pure translations (event and slash
command -> `Inbound`, reply -> mrkdwn chunks), `channel` the I/O class around slack-bolt.
Only this package's own modules import each other; no other channel is imported."""

from .channel import SlackChannel

__all__ = ["SlackChannel"]
