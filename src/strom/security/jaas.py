"""Kafka's JAAS configuration values (``sasl.jaas.config``), e.g.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

Only the single-entry form Kafka accepts in a property is read: a login module, a control flag and
``key=value`` options, ending with ';'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:([A-Za-z0-9_.$-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))|(;))')


class JaasError(ValueError):
    pass


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>="<password>"`` options: the users PLAIN lets in."""
        return {k[len("user_"):]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


def parse(text: str) -> JaasEntry:
    head = re.match(r"\s*([A-Za-z0-9_.$]+)\s+([A-Za-z]+)", text)
    if head is None:
        raise JaasError("expected '<LoginModule> required key=\"value\" ... ;'")
    module, flag = head.group(1), head.group(2).lower()
    if flag not in _FLAGS:
        raise JaasError(f"unknown control flag '{head.group(2)}' (one of {', '.join(_FLAGS)})")
    options: dict[str, str] = {}
    pos = head.end()
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise JaasError(f"cannot parse the options at '{text[pos:pos + 20].strip()}' (missing ';'?)")
        pos = m.end()
        if m.group(4):
            break
        value = m.group(2) if m.group(2) is not None else m.group(3)
        options[m.group(1)] = re.sub(r"\\(.)", r"\1", value)
    if text[pos:].strip():
        raise JaasError("only one login module may be given in a property")
    return JaasEntry(module, flag, options)
