"""The broker's ACLs: the authorizer handlers ask (``allowed``), kept current from the ACL store, and
the changes CreateAcls and DeleteAcls make. Without ``authorizer.class.name`` every request is
allowed and the ACL APIs answer SECURITY_DISABLED, as in Kafka."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from strom.security.acl import (
    CLUSTER_NAME,
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
)
from strom.security.acl_store import AclStore, LocalAclStore, ZkAclStore

if TYPE_CHECKING:
    from strom.broker.context import RequestContext
    from strom.broker.server import Broker

log = logging.getLogger("strom.security")
audit = logging.getLogger("strom.audit")

class AclManager:
    def __init__(self, broker: Broker) -> None:
        cfg = broker.config
        self.broker = broker
        self.authorizer: AclAuthorizer | None = None
        if cfg.authorizer_class_name:
            self.authorizer = AclAuthorizer(cfg.super_users, cfg.allow_everyone_if_no_acl_found)
        self.store: AclStore
        if broker.cluster is not None:
            self.store = ZkAclStore(broker.cluster.store.zk)
        else:
            self.store = LocalAclStore(list(cfg.log_dirs)[0])
        self._reloading: asyncio.Task[None] | None = None
        self._reload_again = False

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    async def start(self) -> None:
        if self.authorizer is None:
            return
        await self._reload()
        if isinstance(self.store, ZkAclStore):
            loop = asyncio.get_running_loop()
            watch_store = self.store
            def changed() -> None:  # kazoo's thread
                loop.call_soon_threadsafe(self._schedule_reload)

            await loop.run_in_executor(None, watch_store.watch, changed)
        log.info("ACL authorizer on: %d ACLs, super users %s, allow.everyone.if.no.acl.found=%s",
                 len(self.authorizer.bindings()), sorted(self.authorizer.super_users) or "none",
                 str(self.authorizer.allow_if_none).lower())

    def _schedule_reload(self) -> None:
        if self._reloading is not None and not self._reloading.done():
            self._reload_again = True  # a change came during a reload: one more after it
            return
        self._reloading = self.broker.spawn(self._reload_loop())

    async def _reload_loop(self) -> None:
        while True:
            self._reload_again = False
            try:
                await self._reload()
            except Exception:
                log.exception("could not reload ACLs; keeping the ones loaded before")
            if not self._reload_again:
                return

    async def _reload(self) -> None:
        assert self.authorizer is not None
        bindings = await asyncio.get_running_loop().run_in_executor(None, self.store.load)
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

    def cluster_allowed(self, ctx: RequestContext, operation: AclOperation) -> bool:
        return self.allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    # ---- changes (CreateAcls, DeleteAcls) --------------------------------------------------------

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.store.add, list(bindings))
        await self._reload()  # this broker answers with them at once; the others follow the watch

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """The bindings each filter matched, all of them removed."""
        assert self.authorizer is not None
        current = await asyncio.get_running_loop().run_in_executor(None, self.store.load)
        matched = [[b for b in sorted(current, key=_order) if f.matches(b)] for f in filters]
        doomed = {b for m in matched for b in m}
        if doomed:
            await asyncio.get_running_loop().run_in_executor(None, self.store.remove, doomed)
        await self._reload()
        return matched

    def describe(self, f: AclBindingFilter) -> list[AclBinding]:
        assert self.authorizer is not None
        return sorted((b for b in self.authorizer.bindings() if f.matches(b)), key=_order)


def _order(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission)
