"""DescribeUserScramCredentials / AlterUserScramCredentials, decided (sans-IO): which users and
mechanisms to report, which changes to make, and Kafka's error for each user that cannot be served."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from strom.security.credentials import Credentials
from strom.security.scram import MAX_ITERATIONS, MECHANISM_NAMES, MECHANISMS, MIN_ITERATIONS, ScramCredential

RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL, UNSUPPORTED_SASL_MECHANISM = 91, 92, 93, 33


def describe(users: list[str] | None, credentials: Credentials) -> list[dict[str, Any]]:
    """One result per user: its mechanisms and iterations (never salts or keys)."""
    def infos(name: str) -> list[dict[str, int]]:
        return [{"mechanism": MECHANISMS[m], "iterations": c.iterations}
                for m, c in sorted(credentials.get(name, {}).items())]

    if not users:  # null or empty: everyone with a credential
        return [_result(u, 0, None, credential_infos=infos(u)) for u in sorted(credentials)]
    counts = Counter(users)
    out = []
    for name in dict.fromkeys(users):
        if counts[name] > 1:
            out.append(_result(name, DUPLICATE_RESOURCE,
                               f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"))
        elif name not in credentials:
            out.append(_result(name, RESOURCE_NOT_FOUND, f"Attempt to describe a user credential that does not exist: {name}"))
        else:
            out.append(_result(name, 0, None, credential_infos=infos(name)))
    return out


@dataclass
class Alteration:
    results: list[dict[str, Any]] = field(default_factory=list)
    upserts: list[tuple[str, str, ScramCredential]] = field(default_factory=list)
    deletions: list[tuple[str, str]] = field(default_factory=list)


def alter(deletions: list[Any], upsertions: list[Any], credentials: Credentials) -> Alteration:
    """Kafka's rules: a user named twice for one mechanism, an unknown mechanism, iterations out of
    4096..16384 or an empty salted password fail that user entirely; the others are applied."""
    errors: dict[str, tuple[int, str]] = {}
    seen = Counter((d.name, d.mechanism) for d in deletions) + Counter((u.name, u.mechanism) for u in upsertions)
    for (name, mechanism), n in seen.items():
        if n > 1:
            errors.setdefault(name, (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"))
        elif mechanism not in MECHANISM_NAMES:
            errors.setdefault(name, (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
        elif not name:
            errors.setdefault(name, (UNACCEPTABLE_CREDENTIAL, "Username must not be empty"))
    for d in deletions:
        if d.name not in errors and MECHANISM_NAMES[d.mechanism] not in credentials.get(d.name, {}):
            errors[d.name] = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    for u in upsertions:
        if u.name in errors:
            continue
        if u.iterations < MIN_ITERATIONS:
            errors[u.name] = (UNACCEPTABLE_CREDENTIAL, f"Too few iterations: at least {MIN_ITERATIONS}")
        elif u.iterations > MAX_ITERATIONS:
            errors[u.name] = (UNACCEPTABLE_CREDENTIAL, f"Too many iterations: at most {MAX_ITERATIONS}")
        elif not u.salted_password or not u.salt:
            errors[u.name] = (UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
    out = Alteration()
    for d in deletions:
        if d.name not in errors:
            out.deletions.append((d.name, MECHANISM_NAMES[d.mechanism]))
    for u in upsertions:
        if u.name not in errors:
            mechanism = MECHANISM_NAMES[u.mechanism]
            out.upserts.append((u.name, mechanism, ScramCredential.from_salted_password(
                mechanism, bytes(u.salt), bytes(u.salted_password), u.iterations)))
    for name in dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions]):
        code, message = errors.get(name, (0, None))
        out.results.append({"user": name, "error_code": code, "error_message": message})
    return out


def _result(user: str, code: int, message: str | None, credential_infos: list[dict[str, int]] | None = None
            ) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": credential_infos or []}
