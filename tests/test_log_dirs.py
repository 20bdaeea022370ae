"""DescribeLogDirs reports each partition's size in its log directory."""

from __future__ import annotations

from helpers import RawConnection, request_class, values_batch


def test_describe_log_dirs_reports_partition_sizes(module_broker) -> None:
    with RawConnection(module_broker.bootstrap) as conn:
        conn.create_topic("logdirs", 2)
        conn.produce("logdirs", 1, values_batch([b"x" * 1000] * 5))
        req_cls = request_class("describe_log_dirs", 4, "DescribeLogDirsRequest")
        resp = conn.request(35, 4, req_cls(topics=None))
    assert resp.error_code == 0
    [result] = resp.results
    assert result.log_dir == str(module_broker.data_dir)
    assert result.total_bytes > 0 and 0 < result.usable_bytes <= result.total_bytes
    sizes = {p.partition_index: p.partition_size for t in result.topics if t.name == "logdirs" for p in t.partitions}
    assert sizes[0] == 0
    assert 5000 < sizes[1] < 6000  # one batch: 61-byte header plus five ~1 KB records
