"""Passive detectors: set-based SQL that inserts triggers for patterns the model did not see.

Each detector is one `INSERT OR IGNORE … SELECT` so a scan over 100,000 users is a few table
scans, not a loop of queries. Two unique indexes make every detector idempotent: one trigger
per detected situation ever (`source_key`: the silence that started at a given `last_seen`,
the question with a given message id, the drop in a given week) and never two open triggers
of one type per user. Only direct-message chats that are still reachable are nudged, and users
who turned proactive messages off are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from vault.db import Vault

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS
MIN_WEEKLY_MESSAGES = 2  # below this a "drop" is noise

_INSERT = """INSERT OR IGNORE INTO proactive_triggers
    (type, chat, user, context, source_key, execute_at, due_at, created_at)"""
# What differs per backend: reading a JSON setting (true/false or 1/0), summing comparisons,
# and formatting a number.
_OPTED_IN = {
    "sqlite": "coalesce(json_extract(u.settings, '$.proactive_enabled'), 1) != 0",
    "postgresql": """coalesce((u.settings::jsonb -> 'proactive_enabled')::text, '1')
        NOT IN ('0', 'false')""",
}
_RECENT = {
    "sqlite": "sum(at_ms >= :week) AS recent, sum(at_ms < :week) AS earlier",
    "postgresql": "sum((at_ms >= :week)::int) AS recent, sum((at_ms < :week)::int) AS earlier",
}
_AVERAGE = {
    "sqlite": "printf('%.1f', a.earlier / 4.0)",
    "postgresql": "to_char(a.earlier / 4.0, 'FM999999990.0')",
}
# The user's most recent direct-message chat that can still be reached.
_DM_CHAT = """(SELECT m.chat FROM messages m JOIN chats c ON c.id = m.chat
              WHERE m.user = u.id AND c.kind = 'dm' AND c.unreachable_ms IS NULL
              ORDER BY m.at_ms DESC LIMIT 1)"""


@dataclass(frozen=True, slots=True)
class ScanResult:
    dormant_user: int
    unanswered: int
    engagement_drop: int

    @property
    def total(self) -> int:
        return self.dormant_user + self.unanswered + self.engagement_drop


# Users silent since `cutoff`, once per silence (keyed by the last_seen it started at).
_DORMANT = """{insert}
                SELECT 'dormant_user', chat, id, context, key, :now, :now, :now FROM (
                  SELECT u.id, {dm_chat} AS chat,
                         'no message for ' || ((:now - u.last_seen_ms) / {day_ms}) || ' days'
                           AS context,
                         'since:' || u.last_seen_ms AS key
                  FROM users u
                  WHERE u.last_seen_ms < :cutoff AND {opted_in}
                    AND NOT EXISTS (SELECT 1 FROM proactive_triggers t WHERE t.user = u.id
                        AND t.type = 'dormant_user' AND t.source_key = 'since:' || u.last_seen_ms)
                  LIMIT :limit)
                WHERE chat IS NOT NULL"""

# Chats whose last chat message is the assistant asking something, unanswered since `cutoff`.
_UNANSWERED = """{insert}
                SELECT 'unanswered', q.chat, u.id, 'you asked: ' || substr(q.text, 1, 300),
                       'msg:' || q.id, :now, :now, :now
                FROM messages q JOIN chats c ON c.id = q.chat
                JOIN users u ON u.id = (SELECT user FROM messages WHERE chat = q.chat
                                        AND role = 'user' ORDER BY id DESC LIMIT 1)
                WHERE q.id IN (SELECT max(id) FROM messages
                               WHERE kind IN ('chat', 'proactive') GROUP BY chat)
                  AND q.role = 'assistant' AND q.kind = 'chat' AND rtrim(q.text) LIKE '%?'
                  AND q.at_ms < :cutoff AND q.at_ms >= :oldest
                  AND c.kind = 'dm' AND c.unreachable_ms IS NULL AND {opted_in}
                LIMIT :limit"""

# Users whose last week is below `ratio` of their weekly average over the 4 weeks before.
_DROPS = """{insert}
                SELECT 'engagement_drop', chat, id, context, key, :now, :now, :now FROM (
                  SELECT u.id, {dm_chat} AS chat,
                         'messages last week: ' || a.recent || ', weekly average before: '
                           || {average} AS context,
                         'week:' || (:now / {week_ms}) AS key
                  FROM (SELECT user, {recent}
                        FROM messages WHERE role = 'user' AND kind = 'chat'
                          AND at_ms >= :start AND at_ms < :now GROUP BY user) a
                  JOIN users u ON u.id = a.user
                  WHERE a.earlier >= {min_earlier}
                    AND a.recent < :ratio * a.earlier / 4.0 AND {opted_in}
                  LIMIT :limit)
                WHERE chat IS NOT NULL"""


def _detectors(dialect: str) -> tuple[str, str, str]:
    """(dormant, unanswered, drops) in `dialect`'s SQL."""
    parts = {
        "insert": _INSERT, "dm_chat": _DM_CHAT, "opted_in": _OPTED_IN[dialect],
        "recent": _RECENT[dialect], "average": _AVERAGE[dialect], "day_ms": DAY_MS,
        "week_ms": WEEK_MS, "min_earlier": 4 * MIN_WEEKLY_MESSAGES,
    }  # fmt: skip
    dormant, unanswered, drops = (q.format(**parts) for q in (_DORMANT, _UNANSWERED, _DROPS))
    return dormant, unanswered, drops


DETECTORS = {dialect: _detectors(dialect) for dialect in ("sqlite", "postgresql")}
DORMANT, UNANSWERED, DROPS = DETECTORS["sqlite"]


async def scan(
    vault: Vault,
    *,
    now_ms: int,
    dormancy_ms: int | None,
    unanswered_ms: int,
    max_age_ms: int,
    drop_ratio: float,
    limit: int = 10_000,
) -> ScanResult:
    """Run the detectors in one transaction; at most `limit` new triggers each.
    `dormancy_ms` None: the dormant-user detector is off (`[proactive.dormancy] enabled`)."""
    dormant, unanswered, drops = DETECTORS[vault.dialect]
    async with vault.transaction() as tx:
        return ScanResult(
            0
            if dormancy_ms is None
            else await tx.execute_rowcount(
                dormant, {"now": now_ms, "cutoff": now_ms - dormancy_ms, "limit": limit}
            ),
            await tx.execute_rowcount(
                unanswered,
                {
                    "now": now_ms,
                    "cutoff": now_ms - unanswered_ms,
                    "oldest": now_ms - unanswered_ms - max_age_ms,
                    "limit": limit,
                },
            ),
            await tx.execute_rowcount(
                drops,
                {
                    "now": now_ms,
                    "week": now_ms - WEEK_MS,
                    "start": now_ms - 5 * WEEK_MS,
                    "ratio": drop_ratio,
                    "limit": limit,
                },
            ),
        )
