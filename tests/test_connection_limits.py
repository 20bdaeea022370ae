"""Connection limits on a real broker, as Kafka applies them: max.connections.per.ip (with its
overrides) closes a connection beyond the limit as soon as it is accepted; at max.connections the
broker accepts nothing more until a connection closes; connections.max.idle.ms closes connections
that have been silent that long (unauthenticated ones on a SASL listener too); a failed SASL
authentication is answered and closed only connection.failed.authentication.delay.ms later, while
the broker serves everyone else. Each attack is refused and the broker goes on serving."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from brokerproc import BrokerProcess, free_port
from helpers import ConnectionClosed, RawConnection, request_class, values_batch, wait_until

from strom.protocol import wire

sys.path.insert(0, str(Path(__file__).parent / "security"))
from saslraw import handshake, login, plain_token  # noqa: E402

pytestmark = pytest.mark.timeout(120)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')


def served(conn: RawConnection) -> bool:
    """ApiVersions is answered on ``conn`` (False: the broker has closed it)."""
    try:
        return int(conn.api_versions().error_code) == 0
    except (ConnectionClosed, ConnectionResetError, BrokenPipeError):
        return False


def nothing_received(conn: RawConnection) -> bool:
    """Nothing has come on ``conn`` yet, not even its end (a look that does not wait)."""
    conn.sock.setblocking(False)
    try:
        conn.sock.recv(1, socket.MSG_PEEK)
        return False  # an answer, or b"" for a closed connection
    except BlockingIOError:
        return True
    except (ConnectionResetError, BrokenPipeError):
        return False
    finally:
        conn.sock.settimeout(conn.timeout)


def new_connection_served(bootstrap: str, source: str | None = None) -> bool:
    try:
        with RawConnection(bootstrap, source_address=source) as c:
            return served(c)
    except OSError:
        return False


def closed_at_once(bootstrap: str, source: str | None = None) -> bool:
    """A new connection (from ``source``) is accepted by the kernel and then closed by the broker."""
    with RawConnection(bootstrap, source_address=source) as c:
        return c.wait_closed(timeout=30)


def closed_while_other_served(closing: RawConnection, other: RawConnection, started: float, what: str) -> None:
    """The broker closes ``closing`` (within 60 s of ``started``), serving ``other`` all the while."""
    while not closing.wait_closed(timeout=0.05):
        assert served(other), f"the other connection was closed before the {what} one"
        assert time.monotonic() - started < 60, f"the {what} connection was not closed"


def assert_unharmed(b: BrokerProcess, topic: str, value: bytes) -> None:
    """The broker is alive, serves a new client, and still has what was written before the attack
    (the test's own connections may not all have been counted out yet: a refused one is tried again)."""
    assert b.alive()

    def values() -> list[bytes] | None:
        try:
            with RawConnection(b.bootstrap) as c:
                return [bytes(r.value or b"") for r in c.fetch_records(topic, 0)] if served(c) else None
        except (ConnectionClosed, OSError):
            return None

    assert wait_until(values, 30, what="a new client served") == [value]


def write_one(conn: RawConnection, topic: str, value: bytes) -> None:
    assert int(conn.create_topic(topic, 1).error_code) == 0
    assert int(conn.produce(topic, 0, values_batch([value])).error_code) == 0


def write_one_on_new(b: BrokerProcess, topic: str, value: bytes) -> None:
    """On a connection of its own (for limits its closing cannot disturb)."""
    with RawConnection(b.bootstrap) as c:
        write_one(c, topic, value)


def test_a_connection_beyond_max_connections_per_ip_is_closed_at_once(broker_factory: Any) -> None:
    b = broker_factory(overrides={"max.connections.per.ip": "2"})
    first, second = RawConnection(b.bootstrap), RawConnection(b.bootstrap)
    try:
        write_one(first, "kept", b"before")
        assert served(first) and served(second)
        assert closed_at_once(b.bootstrap)  # a third one
        wait_until(lambda: "that address already has max.connections.per.ip=2 connections" in b.log_text(), 10,
                   what="the broker's line about the refused connection")
        assert served(first) and served(second)  # the two within the limit are served on
        assert closed_at_once(b.bootstrap)
        first.close()
        # Its place is free once the broker has seen it close: a new connection is served.
        wait_until(lambda: new_connection_served(b.bootstrap), 30, what="a new connection served after one closed")
        assert served(second)
    finally:
        first.close()
        second.close()
    assert_unharmed(b, "kept", b"before")


def test_overrides_set_the_limit_of_an_address(broker_factory: Any) -> None:
    # 127.0.0.1 by name (resolved at start) may have three connections; every other address one.
    b = broker_factory(overrides={"max.connections.per.ip": "1",
                                  "max.connections.per.ip.overrides": "localhost:3"})
    local = [RawConnection(b.bootstrap) for _ in range(3)]
    other = RawConnection(b.bootstrap, source_address="127.0.0.2")
    try:
        write_one(local[0], "kept", b"before")
        assert all(served(c) for c in local)
        assert served(other)
        assert closed_at_once(b.bootstrap)  # a fourth from 127.0.0.1
        assert closed_at_once(b.bootstrap, source="127.0.0.2")  # a second from 127.0.0.2
        assert all(served(c) for c in local) and served(other)
    finally:
        for c in (*local, other):
            c.close()
    assert_unharmed(b, "kept", b"before")


def test_at_max_connections_a_new_connection_waits_for_a_free_slot(broker_factory: Any) -> None:
    b = broker_factory(overrides={"max.connections": "2"})
    first, second = RawConnection(b.bootstrap), RawConnection(b.bootstrap)
    try:
        write_one(first, "kept", b"before")
        assert served(first) and served(second)
        waiting = RawConnection(b.bootstrap, timeout=30)  # accepted by the kernel, not by the broker
        waiting.send(18, 0, _api_versions_v0())
        wait_until(lambda: "connection limit reached" in b.log_text(), 30, what="the broker at its limit")
        assert nothing_received(waiting)  # held, neither served nor closed, while two are open
        assert served(first) and served(second)
        first.close()
        frame = waiting.read_frame()  # served as soon as a slot is free
        assert frame[:4] == (1).to_bytes(4, "big")  # its correlation id
        assert served(waiting) and served(second)
        waiting.close()
    finally:
        first.close()
        second.close()
    assert_unharmed(b, "kept", b"before")


def test_the_inter_broker_listener_is_spared_the_broker_wide_limit(broker_factory: Any) -> None:
    # Kafka's rule: a broker of the cluster is let in at max.connections, and the least recently
    # active connection of another listener is closed to make room.
    client, internal = free_port(), free_port()
    b = broker_factory(port=client, overrides={
        "listeners": f"CLIENT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "max.connections": "2"})
    quiet, busy = RawConnection(b.bootstrap), RawConnection(b.bootstrap)
    try:
        assert served(quiet) and served(busy) and served(busy)  # busy was active last
        with RawConnection(f"127.0.0.1:{internal}") as replica:
            assert served(replica)
            assert quiet.wait_closed(timeout=30)
            assert served(busy) and served(replica)
    finally:
        quiet.close()
        busy.close()
    assert "making room for a connection on the inter-broker listener INTERNAL" in b.log_text()


def test_a_listener_may_have_its_own_limit() -> None:
    from strom.broker.connection_quotas import ConnectionQuotas
    from strom.config import BrokerConfig, ConfigError

    config = BrokerConfig.load(overrides={
        "listeners": "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "max.connections": "10",
        "listener.name.client.max.connections": "1"})
    quotas = ConnectionQuotas.from_config(config)
    assert quotas.listener_limits == {"CLIENT": 1, "INTERNAL": 10}
    assert quotas.admit("CLIENT", "10.0.0.1") and not quotas.slot_available("CLIENT")
    assert quotas.slot_available("INTERNAL")
    quotas.release("CLIENT", "10.0.0.1")
    assert quotas.slot_available("CLIENT")
    with pytest.raises(ConfigError) as bad:
        ConnectionQuotas.from_config(config.with_overrides({"listener.name.client.max.connections": "-1"}))
    assert bad.value.key == "listener.name.client.max.connections"


def _api_versions_v0() -> Any:
    return request_class("api_versions", 0, "ApiVersionsRequest")()


def test_an_idle_connection_is_closed_and_an_active_one_is_not(broker_factory: Any) -> None:
    b = broker_factory(overrides={"connections.max.idle.ms": "500"})
    write_one_on_new(b, "kept", b"before")
    started = time.monotonic()
    idle, active = RawConnection(b.bootstrap), RawConnection(b.bootstrap)
    try:
        assert served(idle)  # then silence
        closed_while_other_served(idle, active, started, "idle")
        assert time.monotonic() - started >= 0.5  # never before its time
        # The active one outlives several idle periods.
        while time.monotonic() - started < 2.0:
            assert served(active)
        assert served(active)
    finally:
        idle.close()
        active.close()
    assert "idle for longer than connections.max.idle.ms=500" in b.log_text()
    assert_unharmed(b, "kept", b"before")


def sasl_broker(broker_factory: Any, **extra: str) -> tuple[BrokerProcess, str]:
    port, sasl = free_port(), free_port()
    b = broker_factory(overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **extra,
    }, port=port)
    return b, f"127.0.0.1:{sasl}"


def test_an_unauthenticated_connection_on_a_sasl_listener_is_closed_when_idle(broker_factory: Any) -> None:
    b, sasl = sasl_broker(broker_factory, **{"connections.max.idle.ms": "500"})
    write_one_on_new(b, "kept", b"before")
    started = time.monotonic()
    lurker, user = RawConnection(sasl), RawConnection(sasl)
    try:
        assert handshake(lurker, "PLAIN").error_code == 0  # and never logs in
        assert login(user, "PLAIN", "alice", "alice-secret").error_code == 0
        closed_while_other_served(lurker, user, started, "unauthenticated")
        assert served(user)
    finally:
        lurker.close()
        user.close()
    assert "idle for longer than connections.max.idle.ms=500" in b.log_text()
    assert_unharmed(b, "kept", b"before")


def test_a_failed_login_is_answered_and_closed_after_the_delay(broker_factory: Any) -> None:
    delay_ms = 4000
    b, sasl = sasl_broker(broker_factory, **{"connection.failed.authentication.delay.ms": str(delay_ms)})
    write_one_on_new(b, "kept", b"before")
    guesser = RawConnection(sasl, timeout=60)
    try:
        assert handshake(guesser, "PLAIN").error_code == 0
        sent = time.monotonic()
        corr = guesser.send(36, 2, request_class("sasl_authenticate", 2, "SaslAuthenticateRequest")(
            auth_bytes=plain_token("alice", "a-guess")))
        wait_until(lambda: f"answering and closing in {delay_ms} ms" in b.log_text(), 30,
                   what="the broker's line about the failed login")
        # Meanwhile the broker serves others, logins included; the guesser has had nothing yet.
        with RawConnection(sasl) as other:
            assert login(other, "PLAIN", "alice", "alice-secret").error_code == 0
            assert served(other)
        assert served_plaintext(b)
        assert nothing_received(guesser)
        # Then the answer, and the end of the connection.
        got, answer = wire.decode_response(36, 2, guesser.read_frame())
        assert got == corr and int(answer.error_code) == 58  # SASL_AUTHENTICATION_FAILED
        assert guesser.wait_closed(timeout=30)
        assert time.monotonic() - sent >= delay_ms / 1000
    finally:
        guesser.close()
    wait_until(lambda: "SASL authentication failed on listener SASL_PLAINTEXT" in b.log_text(), 10)
    with RawConnection(sasl) as again:  # a right login still works
        assert login(again, "PLAIN", "alice", "alice-secret").error_code == 0
    assert_unharmed(b, "kept", b"before")


def served_plaintext(b: BrokerProcess) -> bool:
    return new_connection_served(b.bootstrap)
