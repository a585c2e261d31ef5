"""A child process for the SIGKILL test: runs one engine tick and blocks inside the third send.

Usage: python proactive_child.py VAULT SENDS_FILE. Prints SENDING when the third message has
reached the "platform" (a line in SENDS_FILE) and the send is still in progress.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from gateway.core.messages import Outbound, SentReceipt
from tests.proactive.support import FileChannel, harness


class HangingChannel(FileChannel):
    """Hangs inside the third send, after the platform got the message."""

    async def send(self, out: Outbound) -> SentReceipt:
        if len(self.sent) == 2:
            self.arrive(out)
            print("SENDING", flush=True)
            await asyncio.Event().wait()
        return await super().send(out)


async def main(db: Path, sends: Path) -> None:
    # One item at a time: the scenario is "two delivered, the third in flight".
    async with harness(db.parent, channel=HangingChannel(sends), concurrency=1) as h:
        h.auto_send = "hello"
        for n in range(5):
            user, chat = await h.user(f"u{n}")
            await h.intent(user, chat)
        await h.engine("child").tick()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
