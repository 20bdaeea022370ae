"""A consumer-protocol group (KIP-848) survives a broker restart, clean (SIGTERM) or not (SIGKILL):
it is read back from __consumer_offsets, and its confluent-kafka members (group.protocol=consumer)
simply go on heartbeating with the same member ids, epochs and partitions, nothing revoked, and
consume every record once."""

from __future__ import annotations

from pathlib import Path

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, confluent_produce, request_class
from test_groups_common import create_topics, poll_all, values
from test_groups_consumer_protocol import CG_BROKER_OVERRIDES, CG_DESCRIBE, Member, Tally

from strom.protocol.errors import ErrorCode as E

SESSION_MS = 8000  # long enough for a restart; a member silent for longer would be expired
OVERRIDES = {**CG_BROKER_OVERRIDES, "group.consumer.session.timeout.ms": str(SESSION_MS),
             "group.consumer.max.session.timeout.ms": str(SESSION_MS)}


def describe(bootstrap: str, group: str) -> tuple[int, int, dict[str, tuple[str, int, tuple[int, ...]]]]:
    """ConsumerGroupDescribe: (group epoch, assignment epoch, client id -> (member id, member epoch,
    assigned partitions))."""
    with RawConnection(bootstrap) as conn:
        d = conn.request(CG_DESCRIBE, 1, request_class("consumer_group_describe", 1, "ConsumerGroupDescribeRequest")(
            group_ids=(group,), include_authorized_operations=False)).groups[0]
    assert d.error_code == E.none, d
    return d.group_epoch, d.assignment_epoch, {
        m.client_id: (m.member_id, m.member_epoch,
                      tuple(sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions)))
        for m in d.members}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_a_consumer_group_survives_a_broker_restart(tmp_path: Path, stop: str) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides=OVERRIDES).start()
    bs, topic, group = broker.bootstrap, f"cg-restart-{stop}", f"cg-restart-{stop}"
    members: list[Member] = []
    try:
        create_topics(bs, {topic: 6})
        confluent_produce(bs, topic, [{**v, "partition": i % 6} for i, v in enumerate(values(60))])
        members = [Member(bs, group, topic, f"m{i}") for i in range(2)]
        tally = Tally()
        poll_all(members, lambda: sorted(len(m.owned) for m in members) == [3, 3] and len(tally.seen) >= 60, 60,
                 tally(members), "two members with 3 partitions each, 60 records")
        before = describe(bs, group)
        owned = [set(m.owned) for m in members]
        revoked = [list(m.revoked) for m in members]  # while the group formed
        assert {c: a for c, (_i, _e, a) in before[2].items()} == {m.name: tuple(sorted(m.owned)) for m in members}

        if stop == "sigterm":
            broker.stop()
        else:
            broker.kill()
        broker.start()
        broker.wait_for_log(f"loaded consumer group {group} with 2 members")

        confluent_produce(bs, topic, [{**v, "partition": i % 6} for i, v in enumerate(values(60, 60))])
        poll_all(members, lambda: len(tally.seen) >= 120, 60, tally(members), "120 records after the restart")
        # The same members, at the same epochs, with the same partitions: no rebalance happened.
        assert describe(bs, group) == before
        assert [m.owned for m in members] == owned
        assert [m.revoked for m in members] == revoked  # nothing revoked (nor lost) since
        assert "UNKNOWN_MEMBER_ID" not in broker.log_text() and "removed after its" not in broker.log_text()
    finally:
        for m in members:
            m.close()
        broker.stop()
    assert max(tally.seen.values()) == 1 and len(tally.seen) == 120
    assert set(tally.values) == {f"v{i}".encode() for i in range(120)}
