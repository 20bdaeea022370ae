"""Changing topic and broker configs at runtime (AlterConfigs, IncrementalAlterConfigs).

Validation answers with Kafka's error codes; a change is persisted in the metadata store, then
applied live: each partition log gets its new LogConfig (a new retention.ms counts at the next
retention check, a new segment.bytes at the next roll), and the log cleaner is woken. Dynamic broker
configs live at two levels, as in Kafka: resource name "" (cluster-wide defaults) and the broker's
id (this broker's own); both change the defaults every topic without an override inherits.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from strom.cluster.metadata import ZooKeeperUnavailable
from strom.config import (
    BROKER_DEFS,
    TOPIC_DEFS,
    BrokerConfig,
    ConfigError,
    check_dynamic_names,
    no_effect_warnings,
    topic_config_values,
    validate_topic_configs,
    with_dynamic_configs,
)
from strom.config._defs import ConfigType, format_value
from strom.protocol.errors import ErrorCode as E
from strom.security.acl import AclOperation

if TYPE_CHECKING:
    from strom.broker.acls import AclManager
    from strom.broker.context import RequestContext
    from strom.cluster.metadata import MetadataStore, TopicInfo
    from strom.config import LiveConfig
    from strom.storage.log import LogConfig
    from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.configs")

TOPIC = 2
BROKER = 4
GROUP = 32  # KIP-848's GROUP config resource (share groups' configs)

# IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OPERATION_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


class ConfigChangeError(Exception):
    """A refused change; ``error_code`` is Kafka's code for it."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def load_persisted(config: BrokerConfig, metadata: MetadataStore) -> BrokerConfig:
    """At start: the static config with the dynamic broker configs kept in the metadata store. A
    stored level that no longer validates is skipped with a warning, never fatal."""
    default = metadata.broker_configs("")
    mine = metadata.broker_configs(str(config.broker_id))
    if not default and not mine:
        return config
    try:
        return with_dynamic_configs(config, default, mine)
    except ConfigError as e:
        log.warning("ignoring stored dynamic broker configs: %s", e)
    empty: dict[str, str] = {}
    for level_default, level_mine in ((default, empty), (empty, mine)):
        try:
            return with_dynamic_configs(config, level_default, level_mine)
        except ConfigError:
            continue
    return config


class ConfigAdmin:
    """``config`` is the broker's, replaced here when a dynamic broker config changes;
    ``topic_log_config`` is a topic's LogConfig under the current config (TopicManager.log_config);
    ``config_changed`` tells retention and the log cleaner to look again (LogMaintenance)."""

    def __init__(self, config: LiveConfig, metadata: MetadataStore, log_manager: LogManager,
                 topic_log_config: Callable[[TopicInfo], LogConfig], config_changed: Callable[[], None]) -> None:
        self._config = config
        self._metadata = metadata
        self._log_manager = log_manager
        self._topic_log_config = topic_log_config
        self._config_changed = config_changed

    # ---- resources -------------------------------------------------------------------------------

    def broker_level(self, resource_name: str) -> str:
        """The metadata key of a BROKER resource: "" or this broker's id; anything else is refused."""
        if resource_name in ("", str(self._config.value.broker_id)):
            return resource_name
        raise ConfigChangeError(
            E.invalid_request,
            f"Unexpected broker id, expected {self._config.value.broker_id} or empty string, but received "
            f"{resource_name}",
        )

    def current(self, resource_type: int, resource_name: str) -> dict[str, str]:
        """The overrides a resource has now (a topic's configs, a broker level's dynamic configs)."""
        if resource_type == TOPIC:
            info = self._metadata.get_topic(resource_name)
            if info is None:
                raise ConfigChangeError(E.unknown_topic_or_partition,
                                        f"Topic '{resource_name}' does not exist.")
            return dict(info.configs)
        if resource_type == BROKER:
            return self._metadata.broker_configs(self.broker_level(resource_name))
        if resource_type == GROUP:
            if not resource_name:
                raise ConfigChangeError(E.invalid_request, "A group resource needs a group id")
            return self._metadata.group_configs(resource_name)
        raise ConfigChangeError(E.invalid_request, f"Unsupported resource type {resource_type}: only topics "
                                                 "(2), brokers (4) and groups (32) have configs that can be altered")

    # ---- incremental operations ------------------------------------------------------------------

    def apply_operations(
        self, resource_type: int, resource_name: str, ops: list[tuple[str, int, str | None]]
    ) -> dict[str, str]:
        """The resource's overrides after IncrementalAlterConfigs' (name, operation, value) list."""
        duplicates = sorted(n for n, times in Counter(name for name, _, _ in ops).items() if times > 1)
        if duplicates:
            raise ConfigChangeError(E.invalid_request, f"Error due to duplicate config keys: {', '.join(duplicates)}")
        configs = self.current(resource_type, resource_name)
        for name, op, value in ops:
            config_type = self._config_type(resource_type, name)
            if op == SET:
                if value is None:
                    raise ConfigChangeError(E.invalid_request, f"Null value not supported for: {name}")
                configs[name] = value
            elif op == DELETE:
                configs.pop(name, None)
            elif op in (APPEND, SUBTRACT):
                if config_type is not ConfigType.LIST:
                    verb = "append" if op == APPEND else "subtract"
                    raise ConfigChangeError(E.invalid_config,
                                            f"Config value {verb} is not allowed for config key: {name}")
                items = [s.strip() for s in (value or "").split(",") if s.strip()]
                current = self._current_list(resource_type, name, configs)
                if op == APPEND:
                    current += [i for i in items if i not in current]
                else:
                    current = [c for c in current if c not in items]
                configs[name] = ",".join(current)
            else:
                raise ConfigChangeError(E.invalid_request, f"Unknown alter config operation {op} for {name}")
        return configs

    def _config_type(self, resource_type: int, name: str) -> ConfigType:
        from strom.config.group import GROUP_DEFS

        defs = TOPIC_DEFS if resource_type == TOPIC else GROUP_DEFS if resource_type == GROUP else BROKER_DEFS
        d = defs.get(name)
        if d is None:
            kind = "topic" if resource_type == TOPIC else "group" if resource_type == GROUP else "broker"
            raise ConfigChangeError(E.invalid_config, f"Unknown {kind} config name: {name}")
        return d.type

    def _current_list(self, resource_type: int, name: str, configs: Mapping[str, str]) -> list[str]:
        """A list config's value to APPEND to / SUBTRACT from: the override, else the effective one."""
        if name in configs:
            text = configs[name]
        elif resource_type == TOPIC:
            text = format_value(topic_config_values(self._config.value, {})[name]) or ""
        else:
            text = format_value(self._config.value.get(name)) or ""
        return [s.strip() for s in text.split(",") if s.strip()]

    # ---- validate, persist, apply ----------------------------------------------------------------

    def validate(self, resource_type: int, resource_name: str, configs: dict[str, str]) -> BrokerConfig | None:
        """Check a resource's complete new set of overrides; for a broker level, the new config."""
        self.current(resource_type, resource_name)  # the resource exists
        try:
            if resource_type == TOPIC:
                validate_topic_configs(configs, self._config.value)
                return None
            if resource_type == GROUP:
                from strom.config.group import validate_group_configs

                validate_group_configs(configs, self._config.value)
                return None
            level = self.broker_level(resource_name)
            check_dynamic_names(configs, cluster_default=level == "")
            default = configs if level == "" else self._metadata.broker_configs("")
            mine = configs if level != "" else self._metadata.broker_configs(str(self._config.value.broker_id))
            return with_dynamic_configs(self._config.value, default, mine)
        except ConfigError as e:
            raise ConfigChangeError(E.invalid_config, str(e)) from None

    def alter(self, resource_type: int, resource_name: str, configs: dict[str, str], validate_only: bool) -> None:
        """Replace a resource's overrides with ``configs`` (validated), unless ``validate_only``."""
        new_broker_config = self.validate(resource_type, resource_name, configs)
        if validate_only:
            return
        try:
            self._alter(resource_type, resource_name, configs, new_broker_config)
        except ZooKeeperUnavailable as e:
            raise ConfigChangeError(E.request_timed_out, str(e)) from None

    def _alter(self, resource_type: int, resource_name: str, configs: dict[str, str],
               new_broker_config: BrokerConfig | None) -> None:
        if resource_type == TOPIC:
            before = self.current(TOPIC, resource_name)
            self._metadata.set_topic_configs(resource_name, configs)
            self.apply_topic(resource_name)
            log.info("topic %s configs are now %s", resource_name, configs)
            # Once per change, not again for a later change of another key.
            changed = {k: v for k, v in configs.items() if before.get(k) != v}
            for line in no_effect_warnings(changed, TOPIC_DEFS, f"topic {resource_name}"):
                log.warning("%s", line)
        elif resource_type == GROUP:
            self._metadata.set_group_configs(resource_name, configs)  # read by the share partitions
            log.info("group %s configs are now %s", resource_name, configs)
        else:
            assert new_broker_config is not None
            before = self.current(BROKER, resource_name)
            self._metadata.set_broker_configs(self.broker_level(resource_name), configs)
            self.apply_broker_config(new_broker_config)
            log.info("dynamic broker configs (%s) are now %s", resource_name or "cluster default",
                     {k: None if BROKER_DEFS[k].sensitive else v for k, v in configs.items()})
            changed = {k: v for k, v in configs.items() if before.get(k) != v}
            for line in no_effect_warnings(changed, BROKER_DEFS, "broker"):
                log.warning("%s", line)

    def apply_topic(self, name: str) -> None:
        info = self._metadata.get_topic(name)
        if info is None:
            return
        self._log_manager.update_config(name, self._topic_log_config(info))
        self._config_changed()

    def apply_broker_config(self, config: BrokerConfig) -> None:
        """Put a new broker config in force (its subscribers hear of it: the log manager's defaults)
        and give every topic its log config under it."""
        self._config.replace(config)
        for info in self._metadata.topics().values():
            self._log_manager.update_config(info.name, self._topic_log_config(info))
        self._config_changed()


def alter_resources(
    admin: ConfigAdmin, acls: AclManager, ctx: RequestContext, request: Any,
    new_configs: Callable[[Any], dict[str, str]],
) -> dict[str, Any]:
    """The response shared by AlterConfigs and IncrementalAlterConfigs: per resource, refuse a
    duplicate, compute its new overrides with ``new_configs`` and apply them (or only validate).
    As in Kafka, every copy of a resource named more than once is E.invalid_request whatever the
    principal may do; then each other resource is authorized on its own. Counted in one pass: a
    request may name thousands of resources."""
    times = Counter((r.resource_type, r.resource_name) for r in request.resources)
    responses = []
    for r in request.resources:
        entry: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                                 "resource_name": r.resource_name}
        try:
            if times[(r.resource_type, r.resource_name)] > 1:
                raise ConfigChangeError(E.invalid_request, f"Duplicate resource {r.resource_name!r} in the request")
            refused = acls.config_resource_error(ctx, AclOperation.ALTER_CONFIGS, int(r.resource_type), r.resource_name)
            if refused:
                raise ConfigChangeError(refused, f"Not authorized to alter the configs of {r.resource_name!r}")
            admin.alter(r.resource_type, r.resource_name, new_configs(r), bool(request.validate_only))
        except ConfigChangeError as e:
            entry.update(error_code=e.error_code, error_message=e.message)
        responses.append(entry)
    return {"throttle_time": 0, "responses": responses}
