"""How many segment files the process holds open, against its limit on open files.

Every segment holds its ``.log`` file open (as in Kafka), so a broker with many partitions that
have records runs into ``ulimit -n``. A new segment file is refused once it would leave fewer than
``RESERVE`` descriptors free: the appends that need one are answered KAFKA_STORAGE_ERROR, while
flushes, checkpoints, a clean stop and client connections still get the descriptors they need
(at the very limit a flush could not even duplicate a descriptor, and the stop failed).
"""

from __future__ import annotations

import errno
import resource
import threading

RESERVE = 512  # descriptors kept free; a quarter of the limit where that is smaller


class OpenSegmentFiles:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # segments are opened and closed in threads too (start, stop)
        self.count = 0

    def opened(self) -> None:
        with self._lock:
            self.count += 1

    def closed(self) -> None:
        with self._lock:
            self.count -= 1

    def check_room(self) -> None:
        """Raise EMFILE if one more segment file would eat into the reserve. The limit is read
        each time (a rare call: a new segment), so a limit changed while running counts."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return
        ceiling = soft - min(RESERVE, soft // 4)
        if self.count >= ceiling:
            raise OSError(errno.EMFILE, f"Too many open files: {self.count} segment files are open and "
                                        f"{soft - ceiling} of the process's {soft} (ulimit -n) are kept "
                                        "for connections and flushes")


SEGMENT_FILES = OpenSegmentFiles()
