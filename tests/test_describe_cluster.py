"""DescribeCluster (60) on a single broker, which is a cluster of one: itself, its own controller.

Every version the broker serves is asked over the wire (v0 from Kafka 2.8's AdminClient, v1 with the
endpoint type of KIP-919, v2 as kafka-python and Kafka 4 send it), asking for controllers is refused
as Kafka refuses it, and the clients' own describe_cluster() show the same broker and controller.
(tests/cluster/test_cluster_observe.py does the same against three brokers.)"""

from __future__ import annotations

from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, request_class

pytestmark = pytest.mark.timeout(60)

ALL_CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                          "IDEMPOTENT_WRITE"}


def describe_cluster(bootstrap: str, version: int, endpoint_type: int = 1, authorized_operations: bool = False) -> Any:
    cls = request_class("describe_cluster", version, "DescribeClusterRequest")
    kwargs: dict[str, Any] = {"include_cluster_authorized_operations": authorized_operations}
    if version >= 1:
        kwargs["endpoint_type"] = endpoint_type
    if version >= 2:
        kwargs["include_fenced_brokers"] = True
    with RawConnection(bootstrap) as conn:
        return conn.request(60, version, cls(**kwargs))


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_version_names_the_broker_as_its_own_controller(module_broker: BrokerProcess, version: int) -> None:
    with RawConnection(module_broker.bootstrap) as conn:
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in conn.api_versions().api_keys}
        md = conn.metadata([])
    assert ranges[60] == (0, 2)
    resp = describe_cluster(module_broker.bootstrap, version)
    assert int(resp.error_code) == 0 and resp.error_message is None
    assert resp.cluster_id == md.cluster_id and resp.cluster_id
    assert [(int(b.broker_id), b.host, int(b.port), b.rack) for b in resp.brokers] == \
        [(0, "127.0.0.1", module_broker.port, None)]
    assert int(resp.controller_id) == 0
    assert int(resp.cluster_authorized_operations) == -2147483648  # not asked for
    if version >= 1:
        assert int(resp.endpoint_type) == 1  # brokers
    if version >= 2:
        assert resp.brokers[0].is_fenced is False


def test_controller_endpoints_are_refused_as_kafka_refuses_them(module_broker: BrokerProcess) -> None:
    bs = module_broker.bootstrap
    # A broker is not a controller endpoint (KIP-919): MISMATCHED_ENDPOINT_TYPE, or an unknown type.
    assert int(describe_cluster(bs, 1, endpoint_type=2).error_code) == 114
    assert int(describe_cluster(bs, 2, endpoint_type=2).error_code) == 114
    refused = describe_cluster(bs, 1, endpoint_type=9)
    assert int(refused.error_code) == 115 and refused.error_message == "Unsupported endpoint type 9"
    assert refused.brokers == ()
    # The broker keeps serving on the same connection afterwards.
    assert int(describe_cluster(bs, 2).error_code) == 0


def test_clients_describe_the_single_broker(module_broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient

    bs = module_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})  # held until the answer: a collected client cancels it
    described = admin.describe_cluster(include_authorized_operations=True, request_timeout=15).result(20)
    assert [(n.id, n.host, n.port) for n in described.nodes] == [(0, "127.0.0.1", module_broker.port)]
    assert described.controller.id == 0 and described.cluster_id
    # No authorizer: every cluster operation is allowed, as Kafka reports it without one.
    assert {op.name for op in described.authorized_operations} == ALL_CLUSTER_OPERATIONS

    kp = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=10000)
    try:
        info = kp.describe_cluster()  # DescribeCluster v2 (Metadata only when the broker lacks it)
    finally:
        kp.close()
    assert info["cluster_id"] == described.cluster_id
    assert info["controller_id"] == 0
    assert [(b["broker_id"], b["port"], b["is_fenced"]) for b in info["brokers"]] == [(0, module_broker.port, False)]
    assert set(info["authorized_operations"]) == ALL_CLUSTER_OPERATIONS
