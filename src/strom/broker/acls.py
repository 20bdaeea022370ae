"""The broker's ACLs: the authorizer handlers ask (``allowed``), kept current from the ACL store, and
the changes CreateAcls and DeleteAcls make. Without ``authorizer.class.name`` every request is
allowed and the ACL APIs answer SECURITY_DISABLED, as in Kafka."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from strom.broker.reloader import Reloader
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import (
    CLUSTER_NAME,
    VALID_OPERATIONS,
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
)
from strom.security.acl_store import AclStore, ZkAclStore

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.config import BrokerConfig

log = logging.getLogger("strom.security")
CONFIG_RESOURCE_TOPIC = 2  # DescribeConfigs' resource types: 2 topic, 4 broker, 8 broker logger
CONFIG_RESOURCE_GROUP = 32
audit = logging.getLogger("strom.audit")

class AclManager:
    """``config``: the static settings (authorizer.class.name, super.users,
    allow.everyone.if.no.acl.found); ``store``: where the ACLs are kept (a file on one broker,
    ZooKeeper in a cluster); ``spawn`` runs the reloads a store's watch asks for."""

    def __init__(self, config: BrokerConfig, store: AclStore,
                 spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]]) -> None:
        self.authorizer: AclAuthorizer | None = None
        if config.authorizer_class_name:
            self.authorizer = AclAuthorizer(config.super_users, config.allow_everyone_if_no_acl_found)
        self.store = store
        self._reloader = Reloader("ACLs", self.store.load, self._apply, spawn)

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    async def start(self) -> None:
        if self.authorizer is None:
            return
        await self._reloader.reload()
        if isinstance(self.store, ZkAclStore):
            await asyncio.get_running_loop().run_in_executor(None, self.store.watch, self._reloader.on_change())
        log.info("ACL authorizer on: %d ACLs, super users %s, allow.everyone.if.no.acl.found=%s",
                 len(self.authorizer.bindings()), sorted(self.authorizer.super_users) or "none",
                 str(self.authorizer.allow_if_none).lower())

    def _apply(self, bindings: set[AclBinding]) -> None:
        assert self.authorizer is not None
        self.authorizer.set_bindings(bindings)

    # ---- decisions (handlers) --------------------------------------------------------------------

    def allowed(self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str,
                audit_denial: bool = True) -> bool:
        authorizer = self.authorizer
        if authorizer is None:
            return True
        if authorizer.authorize(ctx.principal, ctx.client_host, operation, resource_type, name):
            return True
        if audit_denial:
            audit.info("DENIED %s from %s: %s on %s:%s (api key %d v%d, client %s)", ctx.principal, ctx.client_host,
                       operation.name, resource_type.name, name, ctx.api_key, ctx.api_version, ctx.client_id)
        return False

    def cluster_allowed(self, ctx: RequestContext, operation: AclOperation, audit_denial: bool = True) -> bool:
        return self.allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, audit_denial)

    def denied(self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
               names: Iterable[str], audit_denial: bool = True) -> set[str]:
        """The names of ``names`` the request may not ``operation`` (none without an authorizer)."""
        if self.authorizer is None:
            return set()
        return {n for n in set(names) if not self.allowed(ctx, operation, resource_type, n, audit_denial)}

    def any_allowed(self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the principal ``operation`` some resource of the type (Kafka's authorizeByResourceType:
        an idempotent producer needs WRITE on some topic, or IDEMPOTENT_WRITE on the cluster)."""
        authorizer = self.authorizer
        return authorizer is None or authorizer.any_allowed(ctx.principal, ctx.client_host, operation, resource_type)

    def config_resource_error(self, ctx: RequestContext, operation: AclOperation, resource_type: int,
                              name: str) -> int:
        """DescribeConfigs' and (Incremental)AlterConfigs' check of one config resource: the topic's
        right for a topic (E.topic_authorization_failed), the cluster's for a broker
        (E.cluster_authorization_failed); 0 when allowed."""
        if self.authorizer is None:
            return 0
        if resource_type == CONFIG_RESOURCE_TOPIC:
            return 0 if self.allowed(ctx, operation, ResourceType.TOPIC, name) else E.topic_authorization_failed
        if resource_type == CONFIG_RESOURCE_GROUP:
            return 0 if self.allowed(ctx, operation, ResourceType.GROUP, name) else E.group_authorization_failed
        return 0 if self.cluster_allowed(ctx, operation) else E.cluster_authorization_failed

    def authorized_operations(self, ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
        """Kafka's bit field of the operations allowed on a resource (Metadata, DescribeCluster,
        DescribeGroups); every operation the type has when there is no authorizer."""
        ops = VALID_OPERATIONS[resource_type] - {AclOperation.ALL}
        if self.authorizer is not None:
            ops = frozenset(op for op in ops if self.allowed(ctx, op, resource_type, name, audit_denial=False))
        return sum(1 << int(op) for op in ops)

    # ---- changes (CreateAcls, DeleteAcls) --------------------------------------------------------

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.store.add, list(bindings))
        await self._reloader.reload()  # this broker answers with them at once; the others follow the watch

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """The bindings each filter matched, all of them removed."""
        assert self.authorizer is not None
        current = await asyncio.get_running_loop().run_in_executor(None, self.store.load)
        matched = [[b for b in sorted(current, key=_order) if f.matches(b)] for f in filters]
        doomed = {b for m in matched for b in m}
        if doomed:
            await asyncio.get_running_loop().run_in_executor(None, self.store.remove, doomed)
        await self._reloader.reload()
        return matched

    def describe(self, f: AclBindingFilter) -> list[AclBinding]:
        assert self.authorizer is not None
        return sorted((b for b in self.authorizer.bindings() if f.matches(b)), key=_order)


def _order(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission)
