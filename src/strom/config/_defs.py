"""Config definition machinery: types, parsing, validators, describe entries.

Mirrors Kafka's ConfigDef closely enough that values parse and print the way Kafka's do
(ints are 32-bit, values are trimmed, booleans are case-insensitive, lists split on commas).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DOUBLE_MAX = 1.7976931348623157e308


class ConfigError(Exception):
    """A configuration value that cannot be used; str() is one line naming the key."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        # One line, always: the broker prints it as its last word at start.
        self.reason = " ".join(str(reason).split())
        super().__init__(f"invalid config {key}: {self.reason}")

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        return (type(self), (self.key, self.reason))


class ConfigType(enum.IntEnum):
    """Kafka's ConfigDef types; the values are DescribeConfigs' config_type ids."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.StrEnum):
    """Where a described value comes from (DescribeConfigs' config_source)."""

    UNKNOWN = "UNKNOWN"
    DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
    DYNAMIC_BROKER_CONFIG = "DYNAMIC_BROKER_CONFIG"
    DYNAMIC_DEFAULT_BROKER_CONFIG = "DYNAMIC_DEFAULT_BROKER_CONFIG"
    STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
    DEFAULT_CONFIG = "DEFAULT_CONFIG"
    DYNAMIC_BROKER_LOGGER_CONFIG = "DYNAMIC_BROKER_LOGGER_CONFIG"
    GROUP_CONFIG = "GROUP_CONFIG"  # set on a GROUP resource (share groups)

    @property
    def id(self) -> int:
        """The wire id used in DescribeConfigs responses (v1+)."""
        return _SOURCE_IDS[self]


_SOURCE_IDS = {
    ConfigSource.UNKNOWN: 0,
    ConfigSource.DYNAMIC_TOPIC_CONFIG: 1,
    ConfigSource.DYNAMIC_BROKER_CONFIG: 2,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: 3,
    ConfigSource.STATIC_BROKER_CONFIG: 4,
    ConfigSource.DEFAULT_CONFIG: 5,
    ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG: 6,
    ConfigSource.GROUP_CONFIG: 8,  # Kafka 4's ConfigSource.GROUP_CONFIG
}


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One row of a DescribeConfigs answer."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: ConfigType = ConfigType.STRING
    doc: str = ""
    # Most specific first, as DescribeConfigs v1+ lists them when include_synonyms is set.
    synonyms: tuple[ConfigSynonym, ...] = ()

    @property
    def is_default(self) -> bool:
        """DescribeConfigs v0's is_default flag."""
        return self.source is ConfigSource.DEFAULT_CONFIG


Value = int | float | bool | str | list[str] | None


class Validator(Protocol):
    def __call__(self, value: Value) -> str | None:
        """Return why the value is invalid, or None when it is fine."""
        ...

    def describe(self) -> str:
        """Human-readable form for the docs, e.g. '[14,...]'."""
        ...


@dataclass(frozen=True)
class Range:
    min: float | None = None
    max: float | None = None

    def __call__(self, value: Value) -> str | None:
        if value is None or isinstance(value, (str, list)):
            return None
        if isinstance(value, float) and math.isnan(value):
            return "must be a number"
        if self.min is not None and value < self.min:
            return f"value {format_value(value)} must be at least {_num(self.min)}"
        if self.max is not None and value > self.max:
            return f"value {format_value(value)} must be no more than {_num(self.max)}"
        return None

    def describe(self) -> str:
        if self.max is None:
            return f"[{_num(self.min)},...]" if self.min is not None else ""
        if self.min is None:
            return f"[...,{_num(self.max)}]"
        return f"[{_num(self.min)},...,{_num(self.max)}]"


def at_least(n: float) -> Range:
    return Range(min=n)


def between(lo: float, hi: float) -> Range:
    return Range(min=lo, max=hi)


@dataclass(frozen=True)
class OneOf:
    """Kafka's ValidString.in (case-sensitive, as Kafka's is)."""

    choices: tuple[str, ...]

    def __call__(self, value: Value) -> str | None:
        if value is None or value in self.choices:
            return None
        return f"value '{value}' must be one of {', '.join(self.choices)}"

    def describe(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True)
class OneOfIgnoringCase:
    """Kafka's CaseInsensitiveValidString.in."""

    choices: tuple[str, ...]

    def __call__(self, value: Value) -> str | None:
        if value is None or (isinstance(value, str) and value.lower() in self.choices):
            return None
        return f"value '{value}' must be one of {', '.join(self.choices)} (in any case)"

    def describe(self) -> str:
        return "(case insensitive) [" + ", ".join(self.choices) + "]"


@dataclass(frozen=True)
class ListOf:
    """Kafka's ValidList.in: every element from a fixed set; strom also rejects an empty list."""

    choices: tuple[str, ...]
    allow_empty: bool = False
    note: str = ""  # said after a refused item, e.g. why the others are not offered

    def __call__(self, value: Value) -> str | None:
        if not isinstance(value, list):
            return None
        if not value and not self.allow_empty:
            return f"must be one or more of {', '.join(self.choices)}"
        for item in value:
            if item not in self.choices:
                note = f" ({self.note})" if self.note else ""
                return f"value '{item}' must be one of {', '.join(self.choices)}{note}"
        return None

    def describe(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True)
class KafkaVersion:
    """Kafka's MetadataVersionValidator, in shape: a Kafka version such as 0.10.2, 2.8 or 3.0-IV1."""

    _pattern = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+){0,2}(-IV[0-9]+)?")

    def __call__(self, value: Value) -> str | None:
        if value is None or (isinstance(value, str) and self._pattern.fullmatch(value)):
            return None
        return f"value '{value}' is not a Kafka version (e.g. 2.8, 3.0-IV1)"

    def describe(self) -> str:
        return "a Kafka version, e.g. 2.8, 3.0-IV1"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


@dataclass(frozen=True)
class ConfigDef:
    """One broker or topic property, as in Kafka's ConfigDef tables."""

    name: str
    type: ConfigType
    default: str | None  # text form, parsed like a configured value; None is Kafka's null
    doc: str
    importance: Importance = Importance.MEDIUM
    validator: Validator | None = None
    # Broker defs: the topic-level config this broker property is the default for.
    topic_config: str | None = None
    # Topic defs: broker properties that supply the default, highest precedence first.
    synonyms: tuple[str, ...] = ()
    # Accepted for compatibility with server.properties files; strom does not act on it.
    ignored: bool = False
    # Kafka 3.x deprecated this key but still accepts it: why it has no effect, for the one line
    # logged whenever it is set (such a key is also `ignored`).
    deprecated: str | None = None
    # Kafka's own default, when strom's differs on purpose (shown in the docs).
    kafka_default: str | None = None

    @property
    def sensitive(self) -> bool:
        return self.type is ConfigType.PASSWORD

    def parse(self, text: str) -> Value:
        """Parse and validate a configured text value; raises ConfigError naming this key."""
        value = parse_value(self.name, self.type, text)
        if self.validator is not None:
            why = self.validator(value)
            if why is not None:
                raise ConfigError(self.name, why)
        return value

    def parsed_default(self) -> Value:
        return None if self.default is None else self.parse(self.default)


_INT_RE = re.compile(r"[+-]?[0-9]+")
_BOUNDS = {
    ConfigType.INT: (INT_MIN, INT_MAX, "int"),
    ConfigType.SHORT: (SHORT_MIN, SHORT_MAX, "short"),
    ConfigType.LONG: (LONG_MIN, LONG_MAX, "long"),
}


def parse_value(name: str, type_: ConfigType, text: str) -> Value:
    """Convert text as Kafka's ConfigDef.parseType does (values are trimmed, except passwords)."""
    if type_ is ConfigType.PASSWORD:
        return text
    s = text.strip()
    if type_ in _BOUNDS:
        lo, hi, label = _BOUNDS[type_]
        if not _INT_RE.fullmatch(s):
            raise ConfigError(name, f"value '{s}' is not a valid {label}")
        n = int(s)
        if not lo <= n <= hi:
            raise ConfigError(name, f"value {s} is out of range for a {label} ({lo} to {hi})")
        return n
    if type_ is ConfigType.BOOLEAN:
        low = s.lower()
        if low not in ("true", "false"):
            raise ConfigError(name, f"value '{s}' must be true or false")
        return low == "true"
    if type_ is ConfigType.DOUBLE:
        try:
            f = float(s)
        except ValueError:
            raise ConfigError(name, f"value '{s}' is not a valid double") from None
        if "_" in s:  # Python accepts 1_0.5; Java does not
            raise ConfigError(name, f"value '{s}' is not a valid double")
        return f
    if type_ is ConfigType.LIST:
        return [] if not s else [item.strip() for item in s.split(",")]
    return s  # STRING, CLASS


def format_value(value: Value) -> str | None:
    """Text form of a parsed value, as Kafka's ConfigDef.convertToString writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, float):
        return java_double(value)
    return str(value)


def java_double(x: float) -> str:
    """Java's Double.toString: plain between 1e-3 and 1e7, else d.dddE<n>; shortest digits."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        r = repr(x)
        return r if "." in r or "e" in r else r + ".0"
    sign, digits, exp = Decimal(repr(x)).normalize().as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits))
    e10 = len(ds) - 1 + exp
    mantissa = ds[0] + "." + (ds[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{e10}"


def no_effect_warnings(configs: Mapping[str, str | None], defs: Mapping[str, ConfigDef], where: str) -> list[str]:
    """One log line per key set in ``configs`` that is accepted and does nothing, naming the key: every
    deprecated key, and an ignored one (kept for server.properties files written for Kafka) set to
    something other than its default, so a setting strom does not act on is never silent."""
    lines = []
    for name, value in configs.items():
        d = defs.get(name)
        if value is None or d is None or not d.ignored:
            continue
        if d.deprecated is not None:
            lines.append(f"{where}: config {name}={value} is deprecated and has no effect: {d.deprecated}")
        elif value != d.default:
            lines.append(f"{where}: config {name}={value} is accepted but strom does not act on it ({d.doc})")
    return lines


def snake(name: str) -> str:
    """Attribute name for a Kafka property: 'log.retention.ms' -> 'log_retention_ms'."""
    return name.replace(".", "_").replace("-", "_")


def index(defs: Sequence[ConfigDef]) -> dict[str, ConfigDef]:
    table: dict[str, ConfigDef] = {}
    for d in defs:
        if d.name in table:
            raise AssertionError(f"duplicate config definition {d.name}")
        table[d.name] = d
    return table
