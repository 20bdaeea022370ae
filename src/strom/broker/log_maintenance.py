"""Retention and compaction for a running broker.

- Retention: every log.retention.check.interval.ms the loop asks each log which of its oldest
  segments retention.ms / retention.bytes (and the log start offset) let go. Choosing them and
  taking them out of the segment list is quick and happens on the loop (the files are renamed to
  .deleted at once); closing and unlinking the files happens in a thread, file.delete.delay.ms later.
  The offset checkpoints are written after a pass that deleted something.
- Compaction: the log cleaner thread (storage.cleaner) for logs with cleanup.policy=compact. Its
  steps that look at or change a log's segment list are handed to the loop with
  ``call_soon_threadsafe``; everything else (reading, rewriting, fsync) stays in its thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from strom.clock import now_ms
from strom.storage.cleaner import CRASH_POINT_CONFIG, CleanerConfig, CleanerStopped, LogCleaner

if TYPE_CHECKING:
    from strom.config import LiveConfig
    from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.maintenance")

T = TypeVar("T")


class LogMaintenance:
    """``config`` is read as each loop and cleaning round begins (dynamic broker configs count);
    ``spawn`` runs the broker's background tasks (cancelled when it stops)."""

    def __init__(self, config: LiveConfig, log_manager: LogManager,
                 spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]],
                 on_log_start_moved: Callable[[str, int], None] | None = None) -> None:
        """``on_log_start_moved`` is told of each partition whose log start offset retention moved
        (fetch sessions tell it)."""
        self._config = config
        self._on_log_start_moved = on_log_start_moved
        self._log_manager = log_manager
        self._spawn = spawn
        self.cleaner: LogCleaner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._wake_retention: asyncio.Event | None = None
        self.retention_passes = 0
        # Removed segment files are closed and unlinked off the loop (see LogManager.defer_deletions).
        log_manager.defer_deletions = True

    def cleaner_config(self) -> CleanerConfig:
        """Read at every cleaning round: dynamic broker config changes apply to the next one."""
        c = self._config.value
        return CleanerConfig(
            enabled=c.log_cleaner_enable and c.log_cleaner_threads > 0,
            backoff_ms=c.log_cleaner_backoff_ms,
            dedupe_buffer_size=c.log_cleaner_dedupe_buffer_size,
            io_buffer_size=max(c.log_cleaner_io_buffer_size, 4096),
            io_buffer_load_factor=c.log_cleaner_io_buffer_load_factor,
            io_max_bytes_per_second=c.log_cleaner_io_max_bytes_per_second,
            crash_point=c.raw.get(CRASH_POINT_CONFIG),  # TEST HOOK (see storage.cleaner)
        )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._wake_retention = asyncio.Event()
        self._spawn(self._retention_loop())
        self._spawn(self._producer_expiration_loop())
        if self._config.value.log_cleaner_enable:
            self.cleaner = LogCleaner(self._log_manager, self.cleaner_config, run_on_owner=self._run_on_loop)
            await loop.run_in_executor(None, self.cleaner.start)

    async def stop(self) -> None:
        """Stop the cleaner (a round in progress is abandoned before its swap) and wait for it."""
        self._stopping.set()
        if self.cleaner is not None:
            self.cleaner.stop()
            await asyncio.get_running_loop().run_in_executor(None, self.cleaner.join, 60.0)

    def config_changed(self) -> None:
        """A topic or broker config changed: let the cleaner and retention look again now."""
        if self.cleaner is not None:
            self.cleaner.wakeup()
        if self._wake_retention is not None:
            self._wake_retention.set()

    # ---- the cleaner's hand-over -----------------------------------------------------------------

    def _run_on_loop(self, fn: Callable[[], T]) -> T:
        """From the cleaner thread: run ``fn`` on the event loop and return its result. Gives up
        (CleanerStopped) if the broker stops before the loop got to it."""
        loop = self._loop
        assert loop is not None
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn())
            except BaseException as e:  # handed back to the cleaner thread
                future.set_exception(e)

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError:  # the loop is closed
            raise CleanerStopped from None
        while True:
            try:
                return future.result(timeout=0.5)
            except concurrent.futures.TimeoutError:
                if self._stopping.is_set() and future.cancel():
                    raise CleanerStopped from None

    # ---- producer id expiration ------------------------------------------------------------------

    async def _producer_expiration_loop(self) -> None:
        """Kafka's PeriodicProducerExpirationCheck, every producer.id.expiration.check.interval.ms,
        on every log (leader or follower, as in Kafka). A dict walk per partition, on the loop."""
        while True:
            await asyncio.sleep(self._config.value.producer_id_expiration_check_interval_ms / 1000)
            try:
                self.remove_expired_producers(now_ms())
            except Exception:
                log.exception("producer id expiration check failed")

    def remove_expired_producers(self, now: int) -> int:
        expiration_ms = self._config.value.producer_id_expiration_ms
        removed = 0
        for plog in self._log_manager.all_logs():
            if not plog.closed:
                removed += len(plog.producer_state.remove_expired_producers(now, expiration_ms))
        if removed:
            log.info("forgot %d producer id(s) idle for more than %d ms", removed, expiration_ms)
        return removed

    # ---- retention -------------------------------------------------------------------------------

    async def _retention_loop(self) -> None:
        assert self._wake_retention is not None
        while True:
            interval = self._config.value.log_retention_check_interval_ms / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake_retention.wait(), interval)
            self._wake_retention.clear()
            try:
                await self.retention_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("retention pass failed")

    async def retention_pass(self) -> int:
        """One pass over every log (Kafka's cleanupLogs); returns the segments deleted."""
        loop = asyncio.get_running_loop()
        lm = self._log_manager
        deleted = 0
        for plog in lm.all_logs():
            if plog.closed:
                continue
            before = plog.log_start_offset
            n = plog.delete_old_segments()
            if n:
                deleted += n
                log.info("retention: deleted %d segment(s) of %s-%d, log start offset %d -> %d", n, plog.topic,
                         plog.partition, before, plog.log_start_offset)
                if self._on_log_start_moved is not None:
                    self._on_log_start_moved(plog.topic, plog.partition)
        self.retention_passes += 1
        if deleted:
            await loop.run_in_executor(None, lm.checkpoint)
        await loop.run_in_executor(None, self._delete_due_files)
        return deleted

    def _delete_due_files(self) -> Any:
        return self._log_manager.delete_due_files()
