"""Give-backs that a cancel cannot stop.

When tokens were taken for a request that will not run (a stack refused by a later part, a
caller cancelled while its take was under way), they are given back. On asyncio the give-back
is awaited, often a round trip per part, and the caller's task may be cancelled meanwhile (a
client that went away, a timeout). If the cancel stopped the give-back half way, the parts not
yet given back would stay spent for a request that never ran. So a give-back runs as a task of
its own, which the caller's cancel does not reach: the caller is cancelled at once, as asked,
and the give-back goes on to its end without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

#: Give-backs under way that nobody awaits any more: the event loop holds a task only weakly,
#: so each is kept here until it is done.
_running: set[asyncio.Future[None]] = set()


def in_background(give_back: Awaitable[None]) -> None:
    """Run ``give_back`` on its own, kept until it is done, with nobody awaiting it."""
    task = asyncio.ensure_future(give_back)
    _running.add(task)
    task.add_done_callback(_running.discard)


async def run_to_the_end(give_back: Awaitable[None]) -> None:
    """Await ``give_back`` to its end. If the caller is cancelled meanwhile, the cancel is
    raised at once and ``give_back`` goes on in the background (:func:`in_background`): a
    cancel never leaves it half done. An error of ``give_back`` itself is raised as usual."""
    task = asyncio.ensure_future(give_back)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            in_background(task)
        raise
