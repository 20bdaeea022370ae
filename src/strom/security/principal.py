"""KafkaPrincipal and how a TLS client certificate becomes one (Kafka's SslPrincipalMapper)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """Who a connection acts as, in Kafka's form ``type:name`` ("User:alice")."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


USER_TYPE = "User"
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal(USER_TYPE, name)


class NoMatchingRule(Exception):
    """No ssl.principal.mapping.rules entry matched the certificate's subject."""


# Kafka's rule grammar: DEFAULT, or RULE:pattern/replacement/ with an optional L or U (lower/upper
# case), separated by commas; '/' and '\' inside pattern or replacement are escaped with '\'.
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:[^/\\]|\\.)*)/((?:[^/\\]|\\.)*)/([LU])?)\s*(?:,|$)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None = DEFAULT: the DN as it is
    replacement: str = ""
    case: str | None = None

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)  # Java's Matcher.matches(): the whole DN
        if m is None:
            return None
        out = m.expand(self.replacement)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: the first rule that matches the DN names the user."""

    def __init__(self, rules: str) -> None:
        self.rules: list[_Rule] = []
        text = rules.strip() or "DEFAULT"
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"cannot parse the rule at '{text[pos:]}'")
            pos = m.end()
            if m.group(1):
                self.rules.append(_Rule(None))
                continue
            try:
                pattern = re.compile(_unescape(m.group(2)))
            except re.error as e:
                raise ValueError(f"bad pattern in '{m.group(0).strip()}': {e}") from None
            # Java writes groups as $1; Python's expand wants \g<1>.
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", _unescape(m.group(3)))
            self.rules.append(_Rule(pattern, replacement, m.group(4)))

    def name_for(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules entry matches {dn!r}")


def _unescape(text: str) -> str:
    return re.sub(r"\\([/\\])", r"\1", text)


def subject_dn(der_certificate: bytes) -> str:
    """The certificate's subject as Java's X500Principal.getName() prints it (RFC 2253: the most
    specific part first, "CN=client,O=x"), which Kafka's default mapping uses as the user name."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()
