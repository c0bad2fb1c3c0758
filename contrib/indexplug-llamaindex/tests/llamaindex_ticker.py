"""A task that counts event-loop turns: a coroutine that blocks the loop stops the count."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Ticks:
    """How many turns the loop gave the ticker so far (``count``)."""

    count = 0


@asynccontextmanager
async def ticking() -> AsyncIterator[Ticks]:
    """Run a ticker beside the block, started (one turn given) before the block begins."""
    ticks = Ticks()
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            ticks.count += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        yield ticks
    finally:
        stop.set()
        await task
