"""Kafka's ACL model: bindings (resource pattern + access entry), the filters of DescribeAcls and
DeleteAcls, and the decision an authorizer takes for one principal, host, operation and resource.

Pure: no I/O, no broker. The numeric codes are Kafka's (they travel in CreateAcls & co.).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

WILDCARD = "*"  # a literal resource name matching every name; also the wildcard host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name

# The names Kafka users give the ACL authorizer; strom's own is the same thing under its name.
ACL_AUTHORIZERS = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "strom.security.AclAuthorizer",
})


def client_address(host: str) -> str:
    """The address host ACLs match: an IPv4 client of a dual-stack listener arrives as an
    IPv4-mapped IPv6 address (::ffff:10.0.0.9), which is its IPv4 address, as Kafka (Java's
    InetAddress) sees it."""
    try:
        mapped = ipaddress.IPv6Address(host.split("%", 1)[0]).ipv4_mapped
    except ValueError:
        return host
    return str(mapped) if mapped is not None else host


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# An ALLOW of any of these also allows the key (Kafka: whoever may read, write, delete or alter a
# resource may describe it; whoever may alter configs may describe them).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}

# What each concrete resource type's ACLs may name (Kafka refuses the others on CreateAcls).
VALID_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
                                   AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS, AclOperation.ALL}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALL}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE, AclOperation.ALL}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.ALL}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE, AclOperation.ALL}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS, AclOperation.ALL}),
}


class InvalidAcl(ValueError):
    """A binding or filter Kafka would refuse (INVALID_REQUEST), with the reason."""


def valid_principal(principal: str) -> bool:
    kind, sep, name = principal.partition(":")
    return bool(kind) and bool(sep) and bool(name)


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission: AclPermission

    def validate(self) -> None:
        if self.resource_type not in VALID_OPERATIONS:
            raise InvalidAcl(f"resource type {self.resource_type.name} cannot carry an ACL")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl(f"pattern type {self.pattern_type.name} cannot be stored (LITERAL or PREFIXED)")
        if not self.resource_name:
            raise InvalidAcl("empty resource name")
        if self.resource_type is ResourceType.CLUSTER and (
                self.resource_name != CLUSTER_NAME or self.pattern_type is not PatternType.LITERAL):
            raise InvalidAcl(f"the cluster resource is the literal '{CLUSTER_NAME}'")
        if self.operation not in VALID_OPERATIONS[self.resource_type]:
            raise InvalidAcl(f"operation {self.operation.name} does not apply to {self.resource_type.name}")
        if self.permission not in (AclPermission.ALLOW, AclPermission.DENY):
            raise InvalidAcl(f"permission {self.permission.name} is neither ALLOW nor DENY")
        if not valid_principal(self.principal):
            raise InvalidAcl(f"principal '{self.principal}' is not TYPE:NAME")
        if not self.host:
            raise InvalidAcl("empty host (use '*' for any)")

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        """Does this binding's pattern cover the resource ``name`` of ``resource_type``?"""
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name == name or self.resource_name == WILDCARD


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls' and DeleteAcls' filter. None / ANY match anything; pattern MATCH matches every
    stored pattern that covers ``resource_name`` (literal, the wildcard, prefixes of it)."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermission

    def validate(self) -> None:
        for value, kind in ((self.resource_type, ResourceType), (self.pattern_type, PatternType),
                            (self.operation, AclOperation), (self.permission, AclPermission)):
            if value is kind.UNKNOWN:  # type: ignore[attr-defined]
                raise InvalidAcl(f"filter with an UNKNOWN {kind.__name__}")

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and b.resource_type is not self.resource_type:
            return False
        if not self._matches_pattern(b):
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation is not AclOperation.ANY and b.operation is not self.operation:
            return False
        return self.permission is AclPermission.ANY or b.permission is self.permission

    def _matches_pattern(self, b: AclBinding) -> bool:
        p = self.pattern_type
        if p is PatternType.MATCH:
            if self.resource_name is None:
                return True
            if b.pattern_type is PatternType.PREFIXED:
                return self.resource_name.startswith(b.resource_name)
            return b.resource_name in (self.resource_name, WILDCARD)
        if p is not PatternType.ANY and b.pattern_type is not p:
            return False
        return self.resource_name is None or b.resource_name == self.resource_name


class AclAuthorizer:
    """Kafka's decision: super users pass; a resource no ACL covers follows
    allow.everyone.if.no.acl.found; otherwise a matching DENY refuses, and a matching ALLOW (or one
    that implies the operation) is needed."""

    def __init__(self, super_users: Iterable[str], allow_everyone_if_no_acl_found: bool) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_none = allow_everyone_if_no_acl_found
        self._bindings: dict[ResourceType, list[AclBinding]] = {}
        self._all: frozenset[AclBinding] = frozenset()

    # ---- the ACLs (replaced whole by the store when they change) --------------------------------

    def set_bindings(self, bindings: Iterable[AclBinding]) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        unique = frozenset(bindings)
        for b in unique:
            by_type.setdefault(b.resource_type, []).append(b)
        self._bindings, self._all = by_type, unique

    def bindings(self) -> frozenset[AclBinding]:
        return self._all

    # ---- decisions -------------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        covering = [b for b in self._bindings.get(resource_type, ()) if b.matches_resource(resource_type, name)]
        if not covering:
            return self.allow_if_none
        mine = [b for b in covering if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)]
        if any(b.permission is AclPermission.DENY and b.operation in (operation, AclOperation.ALL) for b in mine):
            return False
        allowing = _IMPLIED_BY.get(operation, frozenset({operation}))
        return any(b.permission is AclPermission.ALLOW and (b.operation in allowing or b.operation is AclOperation.ALL)
                   for b in mine)

    def any_allowed(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Is some resource of the type open to the principal for ``operation``: an ALLOW for it that
        no DENY of the same pattern cancels (Kafka's authorizeByResourceType, used where a client
        needs the right on any one resource, e.g. an idempotent producer's WRITE on some topic)."""
        if principal in self.super_users:
            return True
        bindings = self._bindings.get(resource_type, [])
        if not bindings:
            return self.allow_if_none

        def mine(b: AclBinding) -> bool:
            return b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)

        allowing = _IMPLIED_BY.get(operation, frozenset({operation}))
        denied = {(b.resource_name, b.pattern_type) for b in bindings if mine(b) and b.permission is AclPermission.DENY
                  and b.operation in (operation, AclOperation.ALL)}
        if (WILDCARD, PatternType.LITERAL) in denied:
            return False
        return any(mine(b) and b.permission is AclPermission.ALLOW and (b.operation in allowing or b.operation
                   is AclOperation.ALL) and (b.resource_name, b.pattern_type) not in denied for b in bindings)
