"""A harness for proactive tests: a real vault, stores, delivery and engine on a manual clock."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.agent.memory_tools import memory_tools
from gateway.agent.tools import ToolRegistry
from gateway.core.clock import ManualClock
from gateway.core.llm import LLMRequest, LLMResponse
from gateway.core.messages import ChatKind, Outbound, SentReceipt
from gateway.turns.delivery import Delivery
from proactive.engine import Engine, EngineConfig
from proactive.execute import Executor, no_probe
from proactive.gate_run import Probe
from proactive.policy import PolicyConfig
from proactive.tools import ProactiveTools
from tests.fakes import FakeLLM, MemoryChannel, inbound
from vault.conversations import Conversations
from vault.db import Vault
from vault.memories import Memories
from vault.migrations import migrate
from vault.outbox import Outbox
from vault.proactive.log import ProactiveLog
from vault.proactive.store import ProactiveStore

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR


def utc_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


class BlockingChannel(MemoryChannel):
    """`send` waits for `release` (set it, or cancel the task) after signalling `entered`."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def send(self, out: Outbound) -> SentReceipt:
        self.entered.set()
        await self.release.wait()
        return await super().send(out)


class FileChannel(MemoryChannel):
    """Appends each delivered idempotency key to a file (the 'platform'), which outlives a
    process that is killed."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def arrive(self, out: Outbound) -> None:
        with self.path.open("a") as f:
            f.write(out.idempotency_key + "\n")

    async def send(self, out: Outbound) -> SentReceipt:
        self.arrive(out)
        return await super().send(out)


class Locks:
    def __init__(self) -> None:
        self.locks: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        async with self.locks.setdefault(key, asyncio.Lock()):
            yield


@dataclass
class Harness:
    vault: Vault
    clock: ManualClock
    llm: FakeLLM
    channel: MemoryChannel
    policy: PolicyConfig
    config: EngineConfig
    conversations: Conversations = field(init=False)
    store: ProactiveStore = field(init=False)
    plog: ProactiveLog = field(init=False)
    delivery: Delivery = field(init=False)
    locks: Locks = field(default_factory=Locks)
    model_available: bool = True
    auto_send: str | None = None  # with an empty queue, the gate answers send(auto_send)
    tools: ToolRegistry = field(init=False)  # what the gate may use besides its decision

    def __post_init__(self) -> None:
        self.conversations = Conversations(self.vault)
        self.store = ProactiveStore(self.vault)
        self.plog = ProactiveLog(self.vault)
        self.memories = Memories(self.vault)
        self.tools = ToolRegistry()
        self.tools.register(*memory_tools(self.memories))
        self.tools.register(
            *ProactiveTools(store=self.store, plog=self.plog, policy=self.policy,
                            default_confidence=0.8).tools()
        )  # fmt: skip
        self.delivery = Delivery(
            outbox=Outbox(self.vault), channels={"memory": self.channel}, clock=self.clock,
            backoff_base_s=0.0,
        )  # fmt: skip

    async def call_model(self, request: LLMRequest, chat_key: str | None) -> LLMResponse:
        if not self.model_available:
            from gateway.core.errors import ModelNotConfigured

            raise ModelNotConfigured("no model configured")
        if self.auto_send is not None and not self.llm.replies:
            self.send_decision(self.auto_send)
        return await self.llm.complete(request)

    def engine(
        self, name: str = "engine", probe: Probe = no_probe, seed: int = 1,
        locks: Locks | None = None,
    ) -> Engine:  # fmt: skip
        executor = Executor(
            store=self.store, plog=self.plog, memories=Memories(self.vault),
            call_model=self.call_model, deliver=self.delivery.deliver_pending,
            chat_lock=(locks or self.locks).hold, clock=self.clock, policy=self.policy,
            rng=random.Random(seed), probe=probe, tools=self.tools.proactive(),
        )  # fmt: skip
        return Engine(vault=self.vault, store=self.store, executor=executor, clock=self.clock,
                      config=self.config, name=name)  # fmt: skip

    async def user(
        self, name: str = "u1", tz: str | None = None, *, chat: str | None = None,
        kind: ChatKind = ChatKind.DM, text: str = "hello",
    ) -> tuple[int, int]:  # fmt: skip
        """(user_pk, chat_pk) after the user wrote `text` now."""
        rec = await self.conversations.record_inbound(
            inbound(text, chat=chat or f"chat-{name}", user=name, kind=kind),
            kind="chat", tokens=1, now_ms=self.clock.now_ms(),
        )  # fmt: skip
        assert rec is not None
        if tz is not None:
            await self.conversations.set_timezone(rec.user_pk, tz)
        return rec.user_pk, rec.chat_pk

    async def intent(
        self, user: int, chat: int, *, at: int | None = None, what: str = "check the server",
        confidence: float = 0.8, kind: str = "ai", exact: bool = False,
    ) -> int:  # fmt: skip
        return await self.store.add_intent(
            chat=chat, user=user, what=what, why="user committed", confidence=confidence,
            kind=kind, exact_time=exact, execute_at=self.clock.now_ms() if at is None else at,
            now_ms=self.clock.now_ms(),
        )  # fmt: skip

    async def status(self, intent_id: int, table: str = "proactive_intents") -> str:
        return str(
            await self.vault.scalar(f"SELECT status FROM {table} WHERE id = ?", (intent_id,))
        )

    async def row(self, intent_id: int, table: str = "proactive_intents") -> dict[str, Any]:
        found = await self.vault.fetchone(f"SELECT * FROM {table} WHERE id = ?", (intent_id,))
        assert found is not None
        return dict(found)

    def send_decision(self, message: str = "How did the server fix go?") -> None:
        self.llm.enqueue_tool("proactive_decision", {"action": "send", "message": message})


@contextlib.asynccontextmanager
async def harness(
    tmp_path: Path,
    *,
    start: str = "2026-01-10T12:00:00",
    channel: MemoryChannel | None = None,
    policy: PolicyConfig | None = None,
    **engine: Any,
) -> AsyncIterator[Harness]:
    async with Vault(tmp_path / "p.db") as vault:
        await migrate(vault)
        yield Harness(
            vault=vault,
            clock=ManualClock(utc_ms(start)),
            llm=FakeLLM(),
            channel=channel or MemoryChannel(),
            # No spacing unless a test asks for it: most tests send a user several messages.
            policy=policy or PolicyConfig(jitter_max_ms=0, min_spacing_ms=0),
            config=EngineConfig(**{"lease_ms": 5 * MIN, **engine}),
        )
