"""`Scope`: who and where a turn runs for, as decided by the gateway (never by the model).

Context providers read it to assemble context; tools receive it to act on the current user and
chat only. Because tools get their target from here and the model never passes a user id, a
conversation cannot be talked into acting on someone else's data.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.messages import ChatRef, UserRef


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    user: UserRef
    chat: ChatRef
    user_pk: int
    chat_pk: int
    session_pk: int
    message_pk: int
    text: str
    now_ms: int
    timezone: str | None = None
    is_admin: bool = False
    summary: str | None = None
    session_started_ms: int = 0  # when this conversation began (its last /clear or /compact)
    # A group chat: others read the replies, so nothing private is added to the context.
    in_group: bool = False
