"""The admin HTTP listener against web pages and password guessers, on real brokers: a request naming
another site in its Host header (DNS rebinding) is refused, reads included, and the topic it meant
to delete is still there; the listener's own names and admin.allowed.hosts are answered; /metrics
needs the console's login on a broker with SASL (and Describe on the cluster with an authorizer);
logins are derived off the event loop, so Kafka clients are served while they run, and cost the
same for a user that does not exist; a remembered login ends when the user is deleted or changes
password."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import json
import threading
import types
from collections.abc import Iterator
from typing import Any

import pytest
from brokerproc import BrokerProcess
from helpers import RawConnection, wait_until
from sechelpers import Certs, SecureBroker, add_scram_user, admin_url, start_admin_broker, start_secure

pytestmark = pytest.mark.timeout(120)


def admin_port(b: BrokerProcess) -> int:
    return int(admin_url(b).rsplit(":", 1)[1])


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
    b = start_admin_broker(certs, tmp_path_factory.mktemp("admin-http") / "data", "http",
                           "User:ANONYMOUS;User:admin;User:carol;User:dave")
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


def scram_user(bootstrap: str, name: str, password: str, iterations: int = 4096, delete: bool = False) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    mechanisms = (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    changes = [UserScramCredentialDeletion(name, m) if delete else
               UserScramCredentialUpsertion(name, ScramCredentialInfo(m, iterations), password.encode())
               for m in mechanisms]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.alter_user_scram_credentials(changes, request_timeout=10).values():
        f.result(timeout=15)


def test_kafka_clients_are_served_while_logins_are_derived(sasl_broker: SecureBroker) -> None:
    port = admin_port(sasl_broker.proc)
    plaintext = sasl_broker.addr["PLAINTEXT"]
    scram_user(plaintext, "erin", "erin-pw", iterations=16384)  # the costliest derivation SCRAM allows
    answers: list[int] = []
    stop = threading.Event()
    lock = threading.Lock()

    def guess(n: int) -> None:
        i = 0
        while not stop.is_set():  # wrong passwords: never remembered, derived every time
            status, _ = call(port, "GET", "/api/overview", login=("erin", f"guess-{n}-{i}"))
            with lock:
                answers.append(status)
            i += 1

    guessers = [threading.Thread(target=guess, args=(n,), daemon=True) for n in range(4)]
    for t in guessers:
        t.start()
    try:
        wait_until(lambda: len(answers) >= 4, 60, what="logins being checked")
        with RawConnection(plaintext) as kafka_client:
            for _ in range(50):  # each answered, while the guessers keep the login threads busy
                assert int(kafka_client.api_versions().error_code) == 0
            before = len(answers)
            assert int(kafka_client.api_versions().error_code) == 0
        wait_until(lambda: len(answers) > before, 60, what="logins still being checked afterwards")
    finally:
        stop.set()
        for t in guessers:
            t.join(60)
    assert set(answers) == {401}
    assert call(port, "GET", "/api/overview", login=("erin", "erin-pw"))[0] == 403  # right password: in, no ACL
    with RawConnection(plaintext) as c:
        assert int(c.api_versions().error_code) == 0


def unread_bytes(local_port: int, remote_port: int) -> int | None:
    """Bytes the owner of the socket 127.0.0.1:local_port <- remote_port has not read yet (Linux's
    /proc/net/tcp), or None when there is no such connection."""
    want = (f"0100007F:{local_port:04X}", f"0100007F:{remote_port:04X}")
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if (fields[1], fields[2]) == want:
                return int(fields[4].split(":")[1], 16)
    return None


def test_a_login_being_derived_holds_up_no_kafka_client(certs: Certs, tmp_path: Any) -> None:
    import os
    import secrets

    from strom.security.scram import ScramCredential

    # A user whose credential takes seconds to derive (the API allows at most 16384 iterations;
    # the credentials file takes what it is given), so that one login is visibly in progress.
    data = tmp_path / "data"
    data.mkdir()
    slow = {m: ScramCredential(secrets.token_bytes(64), secrets.token_bytes(64), secrets.token_bytes(64),
                               4_000_000).to_text() for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
    path = data / "scram-credentials.json"
    path.write_text(json.dumps({"version": 1, "users": {"slow": slow}}))
    os.chmod(path, 0o600)
    b = start_secure(certs, data, ("PLAINTEXT", "SASL_PLAINTEXT"), **{"admin.listeners": "http://127.0.0.1:0"})
    try:
        port = admin_port(b.proc)
        login = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        login.connect()
        assert login.sock is not None
        client_port = login.sock.getsockname()[1]
        sent, answered = threading.Event(), threading.Event()
        status: list[int] = []

        def log_in() -> None:
            token = base64.b64encode(b"slow:a-guess").decode()
            login.request("GET", "/api/overview", headers={"Host": f"127.0.0.1:{port}", "Authorization": f"Basic {token}"})
            sent.set()
            resp = login.getresponse()
            status.append(resp.status)
            answered.set()

        t = threading.Thread(target=log_in, daemon=True)
        t.start()
        assert sent.wait(30)
        # The broker has read the request (nothing left unread on its side): the login is being checked.
        wait_until(lambda: unread_bytes(port, client_port) == 0, 30, what="the broker reading the login")
        with RawConnection(b.addr["PLAINTEXT"]) as kafka_client:
            assert int(kafka_client.api_versions().error_code) == 0
            assert not answered.is_set(), "the Kafka client was answered only after the login"
            assert int(kafka_client.api_versions().error_code) == 0
        t.join(120)
        assert status == [401]
    finally:
        b.proc.stop()


def test_a_remembered_login_ends_with_a_new_password_or_a_deleted_user(sasl_broker: SecureBroker) -> None:
    port = admin_port(sasl_broker.proc)
    plaintext = sasl_broker.addr["PLAINTEXT"]
    add_scram_user(plaintext, "carol", "carol-pw")
    assert call(port, "GET", "/api/overview", login=("carol", "carol-pw"))[0] == 200  # now remembered
    scram_user(plaintext, "carol", "carol-new-pw")
    assert call(port, "GET", "/api/overview", login=("carol", "carol-pw"))[0] == 401
    assert call(port, "GET", "/api/overview", login=("carol", "carol-new-pw"))[0] == 200
    add_scram_user(plaintext, "dave", "dave-pw")
    make_topic(plaintext, "dave-must-not")
    assert call(port, "GET", "/api/overview", login=("dave", "dave-pw"))[0] == 200
    scram_user(plaintext, "dave", "", delete=True)
    origin = f"http://127.0.0.1:{port}"
    assert call(port, "DELETE", "/api/topics/dave-must-not", origin=origin, login=("dave", "dave-pw"))[0] == 401
    assert call(port, "GET", "/api/overview", login=("dave", "dave-pw"))[0] == 401
    assert topic_exists(plaintext, "dave-must-not")


# ------------------------------------------------------------------------------ how a login is checked


def fake_broker(users: dict[str, dict[str, Any]]) -> Any:
    listener = types.SimpleNamespace(uses_sasl=True, mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                                     plain_users={"paula": "paula-pw"})
    return types.SimpleNamespace(security={"SASL_PLAINTEXT": listener},
                                 scram_credential=lambda user, mechanism: users.get(user, {}).get(mechanism))


def test_logins_are_derived_in_a_thread_and_cost_the_same_for_unknown_users(monkeypatch: pytest.MonkeyPatch) -> None:
    from strom.admin.login import AdminLogin
    from strom.security.scram import ScramCredential

    users = {"bob": {m: ScramCredential.from_password(m, "bob-pw") for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}}
    login = AdminLogin(fake_broker(users))
    derivations: list[tuple[str, int, int, bool]] = []
    real = hashlib.pbkdf2_hmac

    def spy(name: str, password: bytes, salt: bytes, iterations: int, *rest: Any) -> bytes:
        derivations.append((name, len(salt), iterations, threading.current_thread() is threading.main_thread()))
        return real(name, password, salt, iterations, *rest)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", spy)

    def check(user: str, password: str) -> tuple[bool, list[tuple[str, int, int, bool]]]:
        derivations.clear()
        ok = asyncio.run(login.check(user, password))
        return ok, list(derivations)

    try:
        ok, known = check("bob", "wrong")
        assert not ok
        assert [d[3] for d in known] == [False, False]  # never on the event loop's thread
        ok, unknown = check("nobody", "wrong")
        assert not ok and unknown == known  # the same derivations: same hashes, salt sizes, iterations
        ok, plain = check("paula", "wrong")
        assert not ok and plain == known
        assert check("bob", "bob-pw")[0] and check("paula", "paula-pw")[0]
        assert check("bob", "bob-pw") == (True, [])  # remembered: no derivation
    finally:
        login.close()
