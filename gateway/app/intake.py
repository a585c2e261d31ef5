"""Which intake the app runs: the one-process intake on SQLite, the claiming one on PostgreSQL.

On PostgreSQL several replicas may share the vault, so a chat's saved messages are run by the
replica that holds the chat's claim (`gateway/turns/shared_intake.py`), woken by LISTEN/NOTIFY
hints on a connection of their own (`hints`, from `Fleet.hints`: `vault/pg/notify.py`) with a
poll as the fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.app.config import Config
from gateway.core.metrics import Metrics
from gateway.core.ports import Clock
from gateway.turns.intake import Intake
from gateway.turns.router import Router
from gateway.turns.shared_intake import Hints, SharedIntake
from vault.db import Vault
from vault.intake import IntakeStore
from vault.intake_claims import INTAKE_HINTS, IntakeClaims


def build_intake(
    config: Config, *, vault: Vault, store: IntakeStore, router: Router, clock: Clock,
    metrics: Metrics, replica: str, hints: Callable[[str], Hints | None], served: Sequence[str],
) -> Intake:  # fmt: skip
    if vault.dialect != "postgresql":
        return Intake(store=store, router=router, clock=clock, metrics=metrics, served=served)
    s = config.settings.vault
    return SharedIntake(
        store=store, claims=IntakeClaims(vault), router=router, clock=clock, metrics=metrics,
        replica=replica, hints=hints(INTAKE_HINTS), lease_s=s.inbound_lease_s,
        poll_s=s.inbound_poll_s, served=served,
    )  # fmt: skip
