"""A cache loaded from a store whose reads block (a file, ZooKeeper), kept current: loaded at
start and again whenever the store says it changed (a ZooKeeper watch, on kazoo's thread). Reloads
run one at a time in a thread; a change during one causes one more after it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("strom.broker")


class Reloader(Generic[T]):
    def __init__(self, what: str, load: Callable[[], T], apply: Callable[[T], None],
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]) -> None:
        self.what = what
        self._load = load
        self._apply = apply
        self._spawn = spawn
        self._running: asyncio.Task[None] | None = None
        self._again = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def reload(self) -> None:
        self._apply(await asyncio.get_running_loop().run_in_executor(None, self._load))

    def on_change(self) -> Callable[[], None]:
        """The callback to give a watch (safe from any thread)."""
        loop = asyncio.get_running_loop()

        def changed() -> None:
            loop.call_soon_threadsafe(self._schedule)

        return changed

    def _schedule(self) -> None:
        if self._running is not None and not self._running.done():
            self._again = True
            return
        self._running = self._spawn(self._reload_until_current())

    async def _reload_until_current(self) -> None:
        while True:
            self._again = False
            try:
                await self.reload()
            except Exception:
                log.exception("could not reload %s; keeping the ones loaded before", self.what)
            if not self._again:
                return
