"""Who this process is among the `iris run` replicas that share one vault.

On SQLite there is one replica (the vault is a local file); on PostgreSQL several processes may
share the database. Each has an id, shown in `/healthz` and `/metrics`, stamped on the rows it
claims (inbound, leases) and on the leaderships it holds (the Telegram poller, Slack's Socket
Mode connection). The id is `[vault] replica_id` when set (stable names read better in logs),
else host name, process id and a short random suffix (a restarted process is a new replica:
what the old one held must expire, not be mistaken for its own).

`Replica` is plain state owned by the composition root: the id, the leaderships held now, and
alarms (e.g. a second Telegram poller answering 409) that health reports until cleared, and
its wake-up hint listeners (NOTIFY channel -> an event set while its LISTEN is in effect): one
that is down degrades the replica to polling, which health shows without calling it down.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from dataclasses import dataclass, field


def new_replica_id(configured: str = "") -> str:
    if configured:
        return configured
    host = socket.gethostname().split(".")[0] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(2)}"


@dataclass
class Replica:
    id: str
    leaderships: set[str] = field(default_factory=set)
    alarms: dict[str, str] = field(default_factory=dict)  # name -> one-line reason
    hints: dict[str, asyncio.Event] = field(default_factory=dict)  # channel -> listening

    def lead(self, name: str) -> None:
        self.leaderships.add(name)

    def resign(self, name: str) -> None:
        self.leaderships.discard(name)

    def alarm(self, name: str, reason: str) -> None:
        self.alarms[name] = reason

    def clear(self, name: str) -> None:
        self.alarms.pop(name, None)
