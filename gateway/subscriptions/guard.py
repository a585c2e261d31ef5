"""The privacy filter every subscription event passes: an item leaves only in scope of the
chat it concerns, checked against the rows themselves, whatever produced the candidates.

The finder scopes its reads already; this is the second, independent check the subscription
path makes before anything is stored for delivery. Keys name their item (`memory:<id>`,
`doc:<id>`, `followup:<id>`); anything else is dropped (fail closed). A memory leaves only
in its owner's private chat; a follow-up only in its own user's own chat; a document only where
its scope is visible (`visible(scope)`: the knowledge feature's path rules; no scope means
every chat Iris serves).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from gateway.core.messages import ChatRef, UserRef
from gateway.core.scope import Scope
from vault.subscriptions import SubscriptionStore

Visible = Callable[[Scope], Collection[str]]


def _ids(keys: Sequence[str], kind: str) -> dict[str, int]:
    found = {}
    for key in keys:
        prefix, _, rest = key.partition(":")
        if prefix == kind and rest.isdigit() and len(rest) < 19:
            found[key] = int(rest)
    return found


def chat_scope(chat_key: str, *, in_group: bool, now_ms: int) -> Scope:
    """A scope for a chat no user spoke in (a document changed): no user entries match."""
    channel, _, rest = chat_key.partition(":")
    chat_id, _, thread = rest.partition(":")
    return Scope(
        user=UserRef(channel=channel, user_id=""),
        chat=ChatRef(channel=channel, chat_id=chat_id, thread_id=thread or None),
        user_pk=0, chat_pk=0, session_pk=0, message_pk=0, text="", now_ms=now_ms,
        in_group=in_group,
    )  # fmt: skip


class ItemGuard:
    def __init__(self, store: SubscriptionStore, visible: Visible) -> None:
        self.store = store
        self.visible = visible

    async def allowed(self, scope: Scope, keys: Sequence[str]) -> set[str]:
        """The keys among `keys` whose items may be shown in `scope`'s chat."""
        ok: set[str] = set()
        memories = _ids(keys, "memory")
        if memories and not scope.in_group:
            owners = await self.store.memory_owners(list(memories.values()))
            ok |= {k for k, i in memories.items() if owners.get(i) == scope.user_pk}
        followups = _ids(keys, "followup")
        if followups:
            found = await self.store.followup_owners(list(followups.values()))
            mine = (scope.user_pk, scope.chat_pk)
            ok |= {k for k, i in followups.items() if found.get(i) == mine}
        documents = _ids(keys, "doc")
        if documents:
            scopes = await self.store.document_scopes(list(documents.values()))
            visible = set(self.visible(scope))
            ok |= {
                k
                for k, i in documents.items()
                if i in scopes and (scopes[i] is None or scopes[i] in visible)
            }
        return ok
