"""SCRAM credentials as Kafka stores them: salt, stored key, server key and iterations per mechanism.

The SCRAM exchange itself is scramp's (sasl_server.py); here is only what is kept per user, and its
text form, Kafka's ``salt=...,stored_key=...,server_key=...,iterations=...`` (ZooKeeper
/config/users/<user>, and strom's credentials file).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

import scramp

# DescribeUserScramCredentials / AlterUserScramCredentials number the mechanisms.
MECHANISMS: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES: dict[int, str] = {v: k for k, v in MECHANISMS.items()}
_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
# Kafka's ScramMechanism bounds.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
# How the credentials strom makes look, for both mechanisms: `strom users add` asks for 4096
# iterations by default, and its AdminClient (librdkafka) salts with 64 random bytes; the
# --zookeeper path (from_password) salts the same way. An unknown user's made-up credential has the
# same shape (sasl_server.py), so the answer to a client-first message does not tell who exists.
DEFAULT_ITERATIONS = MIN_ITERATIONS
SALT_BYTES = 64


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
        salt, stored_key, server_key, i = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iterations, salt=os.urandom(SALT_BYTES))
        return cls(salt, stored_key, server_key, i)

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, salted_password: bytes,
                             iterations: int) -> ScramCredential:
        """What AlterUserScramCredentials sends (the client salts the password): the keys RFC 5802
        derives from it, so the password itself never reaches the broker."""
        hf = _HASHES[mechanism]
        client_key = hmac.digest(salted_password, b"Client Key", hf)
        server_key = hmac.digest(salted_password, b"Server Key", hf)
        return cls(salt, hf(client_key).digest(), server_key, iterations)

    def to_text(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        parts = dict(p.split("=", 1) for p in text.split(","))
        b64 = base64.b64decode
        return cls(b64(parts["salt"]), b64(parts["stored_key"]), b64(parts["server_key"]), int(parts["iterations"]))
