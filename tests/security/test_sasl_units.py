"""The sans-IO pieces: the authenticator's states and clock, PLAIN and SCRAM servers against
scramp's client, Kafka's rules for the SCRAM admin requests, and the credential file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import scramp

from strom.security.authenticator import SaslAuthenticator
from strom.security.credentials import FileCredentialStore
from strom.security.listener import ListenerSecurity
from strom.security.principal import user
from strom.security.sasl_client import SaslClient
from strom.security.scram import ScramCredential
from strom.security.scram_admin import alter, describe

CRED = {"SCRAM-SHA-256": ScramCredential.from_password("SCRAM-SHA-256", "pw"),
        "SCRAM-SHA-512": ScramCredential.from_password("SCRAM-SHA-512", "pw")}


def lookup(name: str, mechanism: str) -> ScramCredential | None:
    return CRED[mechanism] if name == "u" else None


class Clock:
    now = 0

    def __call__(self) -> int:
        return self.now


def _auth(reauth_ms: int = 0, clock: Clock | None = None) -> SaslAuthenticator:
    listener = ListenerSecurity("L", "SASL_PLAINTEXT", mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                                plain_users={"p": "plain-pw"}, reauth_ms=reauth_ms)
    return SaslAuthenticator(listener, lookup, clock or Clock())


def _login(auth: SaslAuthenticator, mechanism: str, name: str, password: str) -> int:
    assert auth.handshake(mechanism, 1)[0] == 0
    client = SaslClient(mechanism, name, password)
    token: bytes | None = client.first()
    while token is not None:
        result = auth.authenticate(token)
        if result.error_code:
            return result.error_code
        token = client.step(result.auth_bytes)  # raises if the server did not prove itself
    return 0


@pytest.mark.parametrize(("mechanism", "name", "password"), [
    ("PLAIN", "p", "plain-pw"), ("SCRAM-SHA-256", "u", "pw"), ("SCRAM-SHA-512", "u", "pw")])
def test_login_and_what_is_allowed(mechanism: str, name: str, password: str) -> None:
    auth = _auth()
    assert auth.allows(18) and auth.allows(17) and not auth.allows(0) and not auth.allows(3)
    assert _login(auth, mechanism, name, password) == 0
    assert auth.principal == user(name) and auth.allows(0) and not auth.failed


@pytest.mark.parametrize(("mechanism", "name", "password"), [
    ("PLAIN", "p", "wrong"), ("PLAIN", "nobody", "plain-pw"), ("SCRAM-SHA-512", "u", "wrong"),
    ("SCRAM-SHA-512", "nobody", "pw"), ("SCRAM-SHA-256", "u", "wrong")])
def test_failures_fail_alike(mechanism: str, name: str, password: str) -> None:
    auth = _auth()
    assert _login(auth, mechanism, name, password) == 58
    assert auth.failed and auth.principal is None and not auth.allows(18)


def test_unknown_scram_user_gets_a_stable_plausible_salt() -> None:
    firsts = []
    for _ in range(2):
        auth = _auth()
        auth.handshake("SCRAM-SHA-512", 1)
        client = scramp.ScramClient(["SCRAM-SHA-512"], "nobody", "x")
        server_first = auth.authenticate(client.get_client_first().encode()).auth_bytes.decode()
        firsts.append(dict(kv.split("=", 1) for kv in server_first.split(","))["s"])
    assert firsts[0] == firsts[1]  # asking twice shows nothing about whether the user exists


def test_session_expiry_and_reauthentication() -> None:
    clock = Clock()
    auth = _auth(reauth_ms=1000, clock=clock)
    assert _login(auth, "SCRAM-SHA-512", "u", "pw") == 0
    clock.now = 999_000_000
    assert auth.allows(0)
    clock.now = 1_000_000_001
    assert not auth.allows(0) and auth.allows(17)  # expired: only a new handshake
    assert _login(auth, "SCRAM-SHA-512", "u", "pw") == 0  # with the mechanism it first used
    assert auth.allows(0)
    assert _login(auth, "PLAIN", "p", "plain-pw") == 58  # another principal
    assert auth.failed
    switched = _auth()
    assert _login(switched, "SCRAM-SHA-512", "u", "pw") == 0
    assert _login(switched, "SCRAM-SHA-256", "u", "pw") == 58  # KIP-368: not another mechanism
    assert switched.failed


def test_out_of_order_steps_are_illegal() -> None:
    auth = _auth()
    assert auth.authenticate(b"\0p\0plain-pw").error_code == 34
    auth = _auth()
    assert auth.handshake("SCRAM-SHA-512", 1)[0] == 0
    assert auth.handshake("PLAIN", 1)[0] == 34
    auth = _auth()
    assert auth.handshake("GSSAPI", 1) == (33, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]) and auth.failed


@dataclass
class Upsert:
    name: str
    mechanism: int
    iterations: int = 4096
    salt: bytes = b"salt"
    salted_password: bytes = b"\1" * 64


@dataclass
class Delete:
    name: str
    mechanism: int


def test_alter_rules() -> None:
    existing = {"u": dict(CRED)}
    change = alter([Delete("u", 1), Delete("ghost", 2), Delete("twice", 2)],
                   [Upsert("new", 2), Upsert("few", 2, iterations=100), Upsert("many", 1, iterations=20000),
                    Upsert("bad", 3), Upsert("twice", 2), Upsert("", 1), Upsert("empty", 1, salted_password=b"")],
                   existing)
    codes = {r["user"]: r["error_code"] for r in change.results}
    assert codes == {"u": 0, "ghost": 91, "twice": 92, "new": 0, "few": 93, "many": 93, "bad": 33, "": 93,
                     "empty": 93}
    assert change.deletions == [("u", "SCRAM-SHA-256")]
    assert [(u, m) for u, m, _ in change.upserts] == [("new", "SCRAM-SHA-512")]


def test_salted_password_gives_the_same_keys_as_the_password() -> None:
    iterations = 4096
    direct = ScramCredential.from_password("SCRAM-SHA-512", "secret", iterations)
    import hashlib

    salted = hashlib.pbkdf2_hmac("sha512", b"secret", direct.salt, iterations)
    assert ScramCredential.from_salted_password("SCRAM-SHA-512", direct.salt, salted, iterations) == direct


def test_describe_rules() -> None:
    existing = {"u": dict(CRED)}
    assert describe(None, existing) == [{"user": "u", "error_code": 0, "error_message": None, "credential_infos": [
        {"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 4096}]}]
    codes = {r["user"]: r["error_code"] for r in describe(["u", "x", "d", "d"], existing)}
    assert codes == {"u": 0, "x": 91, "d": 92}


def test_credential_file_round_trip(tmp_path: Path) -> None:
    store = FileCredentialStore(tmp_path)
    store.alter([("u", "SCRAM-SHA-512", CRED["SCRAM-SHA-512"])], [])
    assert (tmp_path / "scram-credentials.json").stat().st_mode & 0o777 == 0o600
    again = FileCredentialStore(tmp_path)
    assert again.get("u", "SCRAM-SHA-512") == CRED["SCRAM-SHA-512"] and again.get("u", "SCRAM-SHA-256") is None
    again.alter([], [("u", "SCRAM-SHA-512")])
    assert FileCredentialStore(tmp_path).all() == {}
