"""The admin HTTP listener against web pages and prying eyes, on real brokers: a request naming
another site in its Host header (DNS rebinding) is refused, reads included, and the topic it meant
to delete is still there; the listener's own names, its advertised name and admin.allowed.hosts are
answered; /metrics needs the console's login on a broker with SASL (and Describe on the cluster with
an authorizer)."""

from __future__ import annotations

import base64
import http.client
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, wait_until
from sechelpers import Certs, SecureBroker, start_secure

pytestmark = pytest.mark.timeout(120)


def admin_port(b: BrokerProcess) -> int:
    for line in b.log_lines:
        m = re.search(r"admin listener ready on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return int(m.group(1))
    raise AssertionError("no admin listener in the log")


def call(port: int, method: str, path: str, host: str | None = None, origin: str | None = None,
         login: tuple[str, str] | None = None, body: Any = None) -> tuple[int, bytes]:
    """One request to the admin listener on 127.0.0.1:port, naming ``host`` in its Host header."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host or f"127.0.0.1:{port}"}
    if origin is not None:
        headers["Origin"] = origin
    if login is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def topic_exists(bootstrap: str, name: str) -> bool:
    with RawConnection(bootstrap) as c:
        return any(t.name == name and int(t.error_code) == 0 for t in c.metadata([name]).topics)


def make_topic(bootstrap: str, name: str) -> None:
    with RawConnection(bootstrap) as c:
        assert int(c.create_topic(name, 1).error_code) == 0


# ------------------------------------------------------------------------------ DNS rebinding


def test_a_rebound_name_is_refused_and_the_topic_stays(broker: BrokerProcess) -> None:
    port = admin_port(broker)
    make_topic(broker.bootstrap, "victim")
    attacker = f"attacker.example:{port}"
    # What a page on attacker.example does once its name points at 127.0.0.1: its requests are
    # same-origin to the browser, and name the attacker's site.
    status, body = call(port, "DELETE", "/api/topics/victim", host=attacker, origin=f"http://{attacker}")
    assert status == 421, body
    assert b"admin.allowed.hosts" in body
    assert topic_exists(broker.bootstrap, "victim")
    for path in ("/api/topics", "/api/topics/victim/messages?partition=0", "/metrics", "/"):
        assert call(port, "GET", path, host=attacker)[0] == 421, path
    status, _ = call(port, "POST", "/api/topics", host=attacker, origin=f"http://{attacker}",
                     body={"name": "planted", "partitions": 1})
    assert status == 421 and not topic_exists(broker.bootstrap, "planted")
    wait_until(lambda: "refused a request for host 'attacker.example'" in broker.log_text(), 10,
               what="the refusal in the broker's log")
    # The broker and its console go on serving, by the listener's own names.
    assert broker.alive()
    with RawConnection(broker.bootstrap) as c:
        assert int(c.api_versions().error_code) == 0


def test_the_listeners_own_names_are_answered(broker: BrokerProcess) -> None:
    port = admin_port(broker)
    make_topic(broker.bootstrap, "mine")
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST.:{port}", f"[::1]:{port}", "127.0.0.1"):
        status, body = call(port, "GET", "/api/topics", host=host)
        assert status == 200 and b'"mine"' in body, (host, status)
    assert call(port, "GET", "/healthz", host=f"localhost:{port}")[0] == 200
    origin = f"http://localhost:{port}"
    assert call(port, "DELETE", "/api/topics/mine", host=f"localhost:{port}", origin=origin)[0] == 200
    wait_until(lambda: not topic_exists(broker.bootstrap, "mine"), 30, what="the topic deleted")


def test_admin_allowed_hosts_and_the_advertised_name_are_answered(broker_factory: Any) -> None:
    from brokerproc import free_port

    kafka = free_port()
    b = broker_factory(port=kafka, overrides={
        "advertised.listeners": f"PLAINTEXT://broker1.example:{kafka}",
        "admin.allowed.hosts": "console.example, .corp.example"})
    port = admin_port(b)
    for host in ("broker1.example", "Console.Example", "corp.example", "kafka.eu.corp.example"):
        assert call(port, "GET", "/api/overview", host=f"{host}:{port}")[0] == 200, host
    for host in ("attacker.example", "evilcorp.example", "console.example.attacker.example", "corp.example.evil"):
        assert call(port, "GET", "/api/overview", host=f"{host}:{port}")[0] == 421, host


def test_a_bad_allowed_host_stops_the_broker_with_one_line(tmp_path: Any) -> None:
    import subprocess

    b = BrokerProcess(tmp_path / "data", overrides={"admin.allowed.hosts": "good.example,bad host"})
    proc = subprocess.run(b.command(), capture_output=True, text=True, timeout=60)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1 and "admin.allowed.hosts" in lines[0], lines


# ------------------------------------------------------------------------------ login


@pytest.fixture(scope="module")
def sasl_broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    b = start_secure(certs, tmp_path_factory.mktemp("admin-http") / "data", ("PLAINTEXT", "SASL_PLAINTEXT"),
                     **{"admin.listeners": "http://127.0.0.1:0",
                        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                        # The PLAINTEXT listener (User:ANONYMOUS) sets the tests up.
                        "super.users": "User:ANONYMOUS;User:admin;User:carol;User:dave"})
    try:
        yield b
    finally:
        b.proc.stop()


def test_metrics_need_the_login_and_name_nothing_without_it(sasl_broker: SecureBroker) -> None:
    port = admin_port(sasl_broker.proc)
    plaintext = sasl_broker.addr["PLAINTEXT"]
    make_topic(plaintext, "payroll-2025")
    status, body = call(port, "GET", "/metrics")
    assert status == 401 and b"payroll" not in body
    status, body = call(port, "GET", "/metrics", login=("admin", "not-the-password"))
    assert status == 401 and b"payroll" not in body
    # alice logs in but may not describe the cluster: no metrics for her either.
    status, body = call(port, "GET", "/metrics", login=("alice", "alice-secret"))
    assert status == 403 and b"payroll" not in body
    status, body = call(port, "GET", "/metrics", login=("admin", "admin-secret"))
    assert status == 200 and b'topic="payroll-2025"' in body
    for probe in ("/healthz", "/readyz"):  # supervisors' probes stay open
        assert call(port, "GET", probe)[0] == 200
