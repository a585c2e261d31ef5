"""One fake per seam; the common ones are re-exported here.

- `tests/fakes/llm.py`: `FakeLLM` (the `LLM` port, queued replies) and `FakeAnthropicAPI`
  (the real Anthropic adapter over `httpx2.MockTransport`); `tests/fakes/anthropic_server.py`:
  `AnthropicFaultServer`, the Messages API on 127.0.0.1 with scripted faults.
- `tests/fakes/channel.py`: `MemoryChannel`, `inbound()`, `Inbox`.
- `tests/fakes/clock.py`: `run_clock_until` for code waiting on the manual clock.
- `tests/fakes/telegram.py`: the Bot API behind respx; `tests/fakes/slack.py`: the Slack Web
  API as a loopback aiohttp server.
"""

from tests.fakes.channel import Inbox, MemoryChannel, inbound
from tests.fakes.clock import run_clock_until
from tests.fakes.llm import FakeAnthropicAPI, FakeLLM, message_body

__all__ = [
    "FakeAnthropicAPI",
    "FakeLLM",
    "Inbox",
    "MemoryChannel",
    "inbound",
    "message_body",
    "run_clock_until",
]
