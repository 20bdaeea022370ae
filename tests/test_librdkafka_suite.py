"""librdkafka's own integration tests against strom: librdkafka 2.8.0's test-runner (built by
`make deps` from Debian's source package, see the Makefile) runs each listed test against a strom
broker of its own, and each is one pytest test here, named after it. A test passes when the runner
says it passed, skipped none of its sub-tests and exited 0 within its time limit. They run in
librdkafka's full mode (not -Q, which skips most sub-tests).

tests/rdkafka_runner.py runs any librdkafka test by hand; docs/testing.md lists which pass today.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from rdkafka_runner import (
    missing_runner_message,
    run_against_new_broker,
    run_against_new_cluster,
    runner_path,
)


@dataclass(frozen=True)
class Case:
    name: str  # the test's name in librdkafka's tests/test.c
    subtests: str | None = None  # only the sub-tests whose name contains this (SUBTESTS)
    quick: bool = False  # the runner's quick mode (-Q): fewer sub-tests, less data
    timeout: float = 60.0  # seconds for the runner; the pytest time limit adds 90 s (broker start, stop)
    scenario: str = "default"  # "noautocreate": a broker with auto.create.topics.enable=false
    passes: int | None = None  # how many sub-test passes the runner must report, when fixed
    brokers: int = 1  # more: a cluster of its own (ZooKeeper and strom brokers, tests/cluster)
    group_protocol: str | None = None  # "consumer": the test's consumers use KIP-848's protocol
    # The broker's group.initial.rebalance.delay.ms: Kafka's 3 s (as librdkafka's test clusters) for
    # the tests that count rebalances, which assume consumers subscribing together join one
    # generation; 0 ms, as strom's other test brokers, for the rest, whose groups then form at once
    # instead of 3 s later for each group they form (0137 forms eight).
    initial_rebalance_delay_ms: int = 0

    @property
    def id(self) -> str:
        return (self.name + (f"[{self.subtests}]" if self.subtests else "")
                + (f"[{self.group_protocol}]" if self.group_protocol else ""))


# Issue #13: librdkafka's admin test for ACLs (0081_admin's CreateAcls, DescribeAcls, DeleteAcls,
# each for ACL binding versions 0 and 1 and from a producer and a consumer client).
ACL_CASES = [Case("0081_admin", subtests=sub, passes=4) for sub in ("CreateAcls", "DescribeAcls", "DeleteAcls")]

# The rest of 0081_admin, one case per group of sub-tests with how many pass (each runs from a
# producer and from a consumer client; DeleteTopics and CreatePartitions once per client). AlterConfigs
# (AlterConfigs and IncrementalAlterConfigs, from each client) sets Kafka's Kerberos broker config
# sasl.kerberos.min.time.before.relogin on broker 0. Left out: the slow CreateTopics, DescribeConsumerGroups, DeleteConsumerGroupOffsets, AlterConsumerGroupOffsets and
# ListConsumerGroupOffsets groups (they pass, in 9 to 26 seconds each).
# The group ones form several groups each: their limit leaves room for a busy machine.
ADMIN_CASES = [Case("0081_admin", subtests=sub, passes=n, timeout=150 if "Groups" in sub else 60) for sub, n in (
    ("unclean_destroy", 4), ("DeleteTopics", 2), ("CreatePartitions", 2),
    ("DescribeConfigs", 2), ("AlterConfigs", 4), ("DeleteRecords", 4), ("ListConsumerGroups", 4), ("DeleteGroups", 4),
)]

# librdkafka's tests of ACLs in force (added with kafka-acls.sh, answered by `strom acls`): a consumer
# subscribed to existing, missing and unauthorized topics gets the right error for each, with and
# without allow.auto.create.topics and wildcards (0109); producing to a topic denied to User:*
# fails with TOPIC_AUTHORIZATION_FAILED (0115); so does fetching with Read denied (0119).
AUTH_CASES = [Case("0109_auto_create_topics"), Case("0115_producer_auth"), Case("0119_consumer_auth")]

# Regression tests: librdkafka tests that pass against one strom broker in a few seconds each and
# exercise the broker (left out: slower ones, and quick ones of the client's own API such as 0020,
# 0021, 0039, 0040, 0053, 0060, 0064, 0065; docs/testing.md lists them all).
# 0137 forms eight groups, one after the other (some 35 s): its limit leaves room for a busy machine.
REGRESSION_CASES = [Case(name, timeout=150 if name.startswith("0137") else 60) for name in (
    "0001_multiobj", "0002_unkpart", "0003_msgmaxsize", "0005_order", "0007_autotopic", "0008_reqacks",
    "0011_produce_batch", "0012_produce_consume", "0013_null_msgs", "0016_client_swname",
    "0017_compression", "0022_consume_batch", "0029_assign_offset", "0031_get_offsets",
    "0034_offset_reset", "0035_api_version", "0036_partial_fetch", "0041_fetch_max_bytes",
    "0042_many_topics", "0044_partition_cnt", "0048_partitioner", "0054_offset_time",
    "0056_balanced_group_mt", "0057_invalid_topic", "0063_clusterid", "0070_null_empty", "0073_headers",
    "0082_fetch_max_bytes", "0085_headers", "0090_idempotence", "0092_mixed_msgver",
    "0099_commit_metadata", "0112_assign_unknown_part", "0130_store_offsets", "0137_barrier_batch_consume",
)]

# Transactions: 0103 (transactional producers: commit, abort, fencing, send_offsets_to_transaction;
# it creates topics with replication factor 3, so it gets three brokers) and 0129 (a consumer
# fetching past aborted transactions). 0098 (read_committed consumers over commits, aborts and
# open transactions) runs for about 190 s on an idle machine with librdkafka 2.8.0 (150 s with
# 2.0.2), nearly all of it the test's own waits (a statistics event after every read, 1 s each):
# its limit leaves room for a busy one.
TXN_CASES = [Case("0103_transactions", brokers=3, timeout=120), Case("0129_fetch_aborted_msgs"),
             Case("0098_consumer_txn", brokers=3, timeout=400)]

# Consumer groups, classic protocol: 0113 (cooperative-sticky incremental rebalancing, in full mode
# some 10 minutes, so one case per group of its sub-tests) and 0118 (commits from the rebalance
# callback). Their counts of rebalances assume Kafka's group.initial.rebalance.delay.ms of 3 s, which
# their brokers get. Not run: 0113's o_java_interop, which skips itself whenever sasl.mechanism is
# set, and librdkafka sets it (GSSAPI by default).
_0113_GROUPS = ("a_assign", "b_subscribe", "c_subscribe", "d_change", "e_change", "f_assign", "g_incremental",
                "h_delete", "i_delete", "j_delete", "k_add", "l_unsubscribe", "m_unsubscribe", "n_wildcard",
                "s_subscribe", "t_max_poll", "v_commit", "x_incremental")
_KAFKA_DELAY = 3000  # Kafka's group.initial.rebalance.delay.ms
GROUP_CASES = ([Case("0113_cooperative_rebalance", subtests=sub, timeout=150, initial_rebalance_delay_ms=_KAFKA_DELAY)
                for sub in _0113_GROUPS]
               + [Case("0113_cooperative_rebalance", subtests=f"use_rebalance_cb: {cb}, subscription_variation: {v}",
                       timeout=150, initial_rebalance_delay_ms=_KAFKA_DELAY) for cb in (0, 1) for v in (0, 1, 2)]
               + [Case("0118_commit_rebalance", initial_rebalance_delay_ms=_KAFKA_DELAY)])

# The same group cases with the consumer group protocol (KIP-848; librdkafka 2.8.0's support is early
# access): each librdkafka test of the suite that subscribes, again with group.protocol=consumer.
# Left out: 0109_auto_create_topics, whose 2.8.0 version expects a heartbeat naming a topic the member
# may not describe to be accepted; Kafka 4 (and strom) answer TOPIC_AUTHORIZATION_FAILED, which later
# librdkafka tests expect (docs/testing.md).
CONSUMER_PROTOCOL_CASES = [Case(name, group_protocol="consumer", timeout=150 if name.startswith("0137") else 60,
                                initial_rebalance_delay_ms=_KAFKA_DELAY if name.startswith("0118") else 0)
                           for name in (
    "0022_consume_batch", "0029_assign_offset", "0042_many_topics", "0056_balanced_group_mt", "0082_fetch_max_bytes",
    "0090_idempotence", "0092_mixed_msgver", "0118_commit_rebalance", "0119_consumer_auth",
    "0129_fetch_aborted_msgs", "0137_barrier_batch_consume",
)]

CASES = ACL_CASES + ADMIN_CASES + AUTH_CASES + TXN_CASES + REGRESSION_CASES + GROUP_CASES + CONSUMER_PROTOCOL_CASES


# Session-scoped, not module-scoped: the cases are spread over the xdist workers one by one.
@pytest.fixture(scope="session", autouse=True)
def _runner_built() -> None:
    if not runner_path().exists():
        pytest.fail(missing_runner_message(), pytrace=False)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=pytest.mark.timeout(c.timeout + 90))
                                  for c in CASES])
def test_librdkafka(case: Case, tmp_path: Path) -> None:
    kw = {"scenario": case.scenario, "subtests": case.subtests, "quick": case.quick, "timeout": case.timeout,
          "group_protocol": case.group_protocol,
          "overrides": {"group.initial.rebalance.delay.ms": str(case.initial_rebalance_delay_ms)}}
    if case.brokers > 1:
        result, logs = run_against_new_cluster(case.name, tmp_path, size=case.brokers, **kw)  # type: ignore[arg-type]
    else:
        result, broker = run_against_new_broker(case.name, tmp_path, **kw)  # type: ignore[arg-type]
        logs = "\n".join(broker.log_lines[-40:])
    report = (f"{result.summary()}\n--- librdkafka test-runner (last 80 lines) ---\n{result.tail()}\n"
              f"--- strom broker logs (last lines) ---\n{logs}")
    assert result.returncode is not None, f"timed out after {case.timeout}s\n{report}"
    assert result.passed, report
    assert not result.subtests_skipped, f"sub-tests skipped: {result.subtests_skipped}\n{report}"
    if case.subtests:
        assert result.subtests_passed, f"no sub-test matched {case.subtests!r}\n{report}"
    if case.passes is not None:
        assert len(result.subtests_passed) == case.passes, f"sub-tests passed: {result.subtests_passed}\n{report}"
