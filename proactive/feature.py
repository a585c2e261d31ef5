"""Part of the composition root: the proactive engine wired into the app.

Split from `gateway/app.py` to keep that module readable; like it, this module builds
concrete pieces. Commands (`/proactive`, `/quiet`, `/why`, `/followups`, `/cancel`) and the
engagement hook are always on — consent and engagement must keep working while the engine is
paused; tools, the context provider, the engine and its admin operations only when
`[proactive] enabled`.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from gateway.core.metrics import LabelValues
from proactive.admin_ops import ProactiveAdmin
from proactive.commands import ProactiveCommands
from proactive.engine import Engine, EngineConfig
from proactive.execute import Executor
from proactive.policy import PolicyConfig
from proactive.provider import ProactiveProvider
from proactive.tools import ProactiveTools
from vault.proactive.admin import ProactiveAdminQueries
from vault.proactive.log import ProactiveLog, engagement_record_hook
from vault.proactive.store import ProactiveStore

if TYPE_CHECKING:
    from gateway.app.app import App


def wire_proactive(app: App) -> None:
    s = app.config.settings.proactive
    policy = PolicyConfig.from_section(s)
    app.proactive_store = store = ProactiveStore(app.vault)
    app.proactive_log = plog = ProactiveLog(app.vault)
    queries = ProactiveAdminQueries(app.vault)
    app.commands.register(
        *ProactiveCommands(
            conversations=app.conversations, store=store, plog=plog, policy=policy
        ).commands()
    )
    app.record_hooks.append(engagement_record_hook)
    _observe(app, queries, plog)
    app.proactive_engine = None
    if not s.enabled:
        return
    executor = Executor(
        store=store,
        plog=plog,
        memories=app.memories,
        call_model=app.agent.call,
        deliver=app.delivery.deliver_pending,
        chat_lock=app.router.chat_lock,
        clock=app.clock,
        policy=policy,
        rng=random.Random(),
    )
    engine = Engine(vault=app.vault, store=store, executor=executor, clock=app.clock,
                    config=EngineConfig.from_section(s))  # fmt: skip
    app.proactive_engine = engine
    app.tools.register(
        *ProactiveTools(store=store, plog=plog, policy=policy,
                        default_confidence=s.default_confidence, wake=engine.wake,
                        scan=engine.scan).tools()
    )  # fmt: skip
    app.pipeline.register(ProactiveProvider(store, plog, policy))
    app.background.append(engine.run)
    ops = ProactiveAdmin(store=store, plog=plog, queries=queries, engine=engine, policy=policy,
                         default_confidence=s.default_confidence)  # fmt: skip
    app.proactive_ops = ops
    for sub in ops.subs():
        app.admin.add(sub)


def _observe(app: App, queries: ProactiveAdminQueries, plog: ProactiveLog) -> None:
    """Proactive figures for `/admin stats`, `GET /stats` and `/metrics`."""

    async def section(since_ms: int) -> dict[str, Any]:
        rate = await plog.engagement_rate(None, app.clock.now_ms())
        return {"outcomes": await queries.outcomes(since_ms),
                "engagement_rate_30d": "n/a" if rate is None else rate}  # fmt: skip

    async def outcomes() -> dict[LabelValues, float]:
        found = await queries.outcomes(0)
        return {
            (source, *key.split("/", 1)): float(count)
            for source, counts in found.items()
            for key, count in counts.items()
        }

    async def log_totals() -> dict[LabelValues, float]:
        return {(name,): float(n) for name, n in (await queries.log_totals()).items()}

    app.stats.sections["proactive"] = section
    app.metrics.gauge("iris_proactive_outcomes_total",
                      "Finished proactive items by source, type and terminal status.",
                      ("source", "type", "status"), outcomes, kind="counter")  # fmt: skip
    app.metrics.gauge("iris_proactive_messages_total",
                      "Proactive messages sent, and how many the user engaged with.",
                      ("state",), log_totals, kind="counter")  # fmt: skip
