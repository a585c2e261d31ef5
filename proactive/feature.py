"""The proactive engine as a feature, plugged in through the seam like any other.

Commands (`/proactive`, `/quiet`, `/why`, `/followups`, `/cancel`), the engagement record
hook and the figures (`/admin stats`, `/metrics`) are always on — consent and engagement must
keep working while the engine is paused. The engine, its tools, its context provider and its
admin operations only when `[proactive] enabled`. The gate offers the model the app's tools
marked `proactive` (`ToolRegistry.proactive()`: read at each call, so tools other features
register later are included). What it built stays on the feature (`store`, `log`, `engine`) for
the composition root and tests to reach.
"""

from __future__ import annotations

import random
from typing import Any

from gateway.core.metrics import LabelValues
from gateway.features.contributions import Contributions, Gauge
from proactive.admin_ops import ProactiveAdmin
from proactive.commands import ProactiveCommands, settings_of
from proactive.engine import Engine, EngineConfig
from proactive.execute import Executor
from proactive.policy import PolicyConfig
from proactive.provider import ProactiveProvider
from proactive.settings import ProactiveSection
from proactive.tools import ProactiveTools
from vault.periodic import PeriodicRuns
from vault.proactive.admin import ProactiveAdminQueries
from vault.proactive.gate_calls import GateCalls
from vault.proactive.log import ProactiveLog, engagement_record_hook
from vault.proactive.store import ProactiveStore


class ProactiveFeature:
    name = "proactive"

    def __init__(self, settings: ProactiveSection, *, rng: random.Random | None = None) -> None:
        self.settings = settings
        self.policy = PolicyConfig.from_section(settings)
        self.rng = rng or random.Random()
        self.engine: Engine | None = None

    def contribute(self, c: Contributions) -> None:
        s, settings, policy = c.services, self.settings, self.policy
        # Only the chats of the channels this process runs: `iris chat` leaves Telegram's
        # follow-ups to `iris run`, and the other way round.
        self.store = store = ProactiveStore(s.vault, served=tuple(s.delivery.channels))
        self.log = plog = ProactiveLog(s.vault)
        queries = ProactiveAdminQueries(s.vault)
        c.command(
            *ProactiveCommands(
                conversations=s.conversations,
                store=store,
                plog=plog,
                policy=policy,
                calls=GateCalls(s.vault),
                engine_on=settings.enabled,
            ).commands()
        )
        c.record_hook(engagement_record_hook)
        self._figures(c, queries)
        if not settings.enabled:
            return
        executor = Executor(
            store=store,
            plog=plog,
            memories=s.memories,
            call_model=s.call_model,
            deliver=s.delivery.deliver_pending,
            chat_lock=s.chat_locks.hold,
            clock=s.clock,
            policy=policy,
            rng=self.rng,
            tools=s.tools.proactive(),
            gate_max_rounds=settings.gate_max_rounds,
        )
        self.engine = engine = Engine(
            vault=s.vault,
            store=store,
            executor=executor,
            clock=s.clock,
            config=EngineConfig.from_section(settings),
            # Every replica runs the scan loop; one scans per scheduled time.
            periodic=PeriodicRuns(s.vault, s.replica_id or "this process"),
        )
        c.tool(
            *ProactiveTools(
                store=store,
                plog=plog,
                policy=policy,
                default_confidence=settings.default_confidence,
                wake=engine.wake,
                scan=engine.scan,
                settings_of=lambda scope: settings_of(s.conversations, scope),
            ).tools()
        )
        c.provider(ProactiveProvider(store, plog, policy))
        c.background(engine.run)
        ops = ProactiveAdmin(
            store=store,
            plog=plog,
            queries=queries,
            engine=engine,
            policy=policy,
            default_confidence=settings.default_confidence,
        )
        c.proactive_ops(ops)
        c.admin(*ops.subs())

    def _figures(self, c: Contributions, queries: ProactiveAdminQueries) -> None:
        """Proactive figures for `/admin stats`, `GET /stats` and `/metrics`."""
        plog, clock = self.log, c.services.clock

        async def section(since_ms: int) -> dict[str, Any]:
            rate = await plog.engagement_rate(None, clock.now_ms())
            return {
                "outcomes": await queries.outcomes(since_ms),
                "engagement_rate_30d": "n/a" if rate is None else rate,
            }

        async def outcomes() -> dict[LabelValues, float]:
            found = await queries.outcomes(0)
            return {
                (source, *key.split("/", 1)): float(count)
                for source, counts in found.items()
                for key, count in counts.items()
            }

        async def log_totals() -> dict[LabelValues, float]:
            return {(name,): float(n) for name, n in (await queries.log_totals()).items()}

        c.stats("proactive", section)
        c.gauge(
            Gauge(
                "iris_proactive_outcomes_total",
                "Finished proactive items by source, type and terminal status.",
                ("source", "type", "status"),
                outcomes,
                kind="counter",
            )
        )
        c.gauge(
            Gauge(
                "iris_proactive_messages_total",
                "Proactive messages sent, and how many the user engaged with.",
                ("state",),
                log_totals,
                kind="counter",
            )
        )
