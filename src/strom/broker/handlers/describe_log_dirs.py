"""DescribeLogDirs (35): per log directory, the size of each partition and the disk's capacity.

v5 says whether each directory is cordoned (KIP-1066: no new partitions placed there); strom has no
cordoning, so none is."""

from __future__ import annotations

import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 5


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not broker.acls.cluster_allowed(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": E.cluster_authorization_failed, "results": []}
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {t.topic: set(t.partitions) for t in request.topics}
    by_dir: dict[str, dict[str, list[dict[str, Any]]]] = {str(d): defaultdict(list) for d in broker.config.log_dirs}
    for plog in broker.log_manager.all_logs():
        if wanted is not None and plog.partition not in wanted.get(plog.topic, ()):
            continue
        log_dir = str(plog.directory.parent)
        by_dir.setdefault(log_dir, defaultdict(list))[plog.topic].append(
            {"partition_index": plog.partition, "partition_size": plog.size_bytes(), "offset_lag": 0,
             "is_future_key": False})
    results = []
    for log_dir, topics in by_dir.items():
        try:
            st = os.statvfs(log_dir)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            total = usable = -1
        results.append({"error_code": 0, "log_dir": log_dir, "total_bytes": total, "usable_bytes": usable,
                        "is_cordoned": False,
                        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
    return {"throttle_time": 0, "error_code": 0, "results": results}
