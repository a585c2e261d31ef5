"""The memory tools: remember, search and forget — always for the turn's own user.

Search answers nothing in a group chat (the group reads what the model writes from it).
Remember and search are also offered to the proactive gate; forgetting is left to turns the
user is present in.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from gateway.agent.tools import Tool
from gateway.core.errors import ToolError
from gateway.core.scope import Scope
from vault.memories import Memories


class RememberArgs(BaseModel):
    text: str = Field(min_length=1, max_length=2000, description="The fact to remember.")


class SearchArgs(BaseModel):
    query: str = Field(min_length=1, max_length=500, description="Words to look for.")


class ForgetArgs(BaseModel):
    id: int = Field(ge=1, le=2**63 - 1, description="The memory id, as shown by memory_search.")


def memory_tools(memories: Memories) -> list[Tool]:
    async def remember(scope: Scope, args: RememberArgs) -> str:
        text = args.text.strip()
        existing = await memories.find(scope.user_pk, text)  # a replayed call adds nothing
        if existing is not None:
            return f"already remembered as memory #{existing}"
        memory_id = await memories.remember(scope.user_pk, text, scope.now_ms)
        return f"remembered as memory #{memory_id}"

    async def search(scope: Scope, args: SearchArgs) -> str:
        if scope.in_group:  # the group reads the answer: the user's memories stay private
            raise ToolError("memories are private: they are not searched in a group chat")
        found = await memories.search(scope.user_pk, args.query, limit=10)
        if not found:
            return "no matching memories"
        return "\n".join(f"#{m.id}: {m.text}" for m in found)

    async def forget(scope: Scope, args: ForgetArgs) -> str:
        if not await memories.forget(scope.user_pk, args.id):
            raise ToolError(f"no memory #{args.id} for this user")
        return f"forgot memory #{args.id}"

    return [
        Tool(
            "memory_remember",
            "Store a long-term fact about the current user.",
            RememberArgs,
            remember,
            proactive=True,
        ),
        Tool(
            "memory_search",
            "Search the current user's long-term memories (not in group chats).",
            SearchArgs,
            search,
            proactive=True,
        ),
        Tool(
            "memory_forget", "Delete one of the current user's memories by id.", ForgetArgs, forget
        ),
    ]
