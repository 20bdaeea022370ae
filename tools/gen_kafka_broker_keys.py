"""Generate src/strom/config/kafka_broker_keys.py: every broker config key Kafka defines, with its type,
default and dynamic update mode, read from Kafka's Java and Scala sources in a git repository.

    python tools/gen_kafka_broker_keys.py [--git-dir /work/.mirror/apache+kafka/repo] [--ref HEAD]

What it reads (at --ref, without a work tree):
  * AbstractKafkaConfig.CONFIG_DEF's list of ConfigDefs; in each of them the ``.define(...)`` and
    ``.defineInternal(...)`` calls: name, type, default (``*_CONFIG`` / ``*_DEFAULT`` constants are
    followed across classes and evaluated), and simple validators (atLeast, between, ValidString.in);
  * DynamicBrokerConfig.scala's sets (with SocketServer's, LogCleaner's, SslConfigs.RECONFIGURABLE_CONFIGS
    and ServerTopicConfigSynonyms) for the dynamic update mode: read-only, per-broker or cluster-wide,
    computed as Kafka's DynamicBrokerConfig.dynamicConfigUpdateModes does.

Defaults that are expressions this script does not evaluate are in HAND_DEFAULTS (Kafka's documented
value, written by hand); keys Kafka added after the source snapshot are in HAND_KEYS. Both are marked
as hand-recorded in the output. Only names, types, defaults and modes are taken; no documentation text.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "strom" / "config" / "kafka_broker_keys.py"

# Defaults written as expressions this script does not evaluate: Kafka's documented value.
HAND_DEFAULTS: dict[str, str | None] = {
    "compression.gzip.level": "-1",  # CompressionType.GZIP.defaultLevel(): Deflater.DEFAULT_COMPRESSION
    "compression.lz4.level": "9",  # CompressionType.LZ4.defaultLevel()
    "compression.zstd.level": "3",  # CompressionType.ZSTD.defaultLevel(): Zstd.defaultCompressionLevel()
    "ssl.keymanager.algorithm": "SunX509",  # KeyManagerFactory.getDefaultAlgorithm() on a standard JVM
    "ssl.trustmanager.algorithm": "PKIX",  # TrustManagerFactory.getDefaultAlgorithm() on a standard JVM
    "message.max.bytes": "1048588",  # 1024 * 1024 + Records.LOG_OVERHEAD (12)
    "compression.type": "producer",  # BrokerCompressionType.PRODUCER.name
    # SecurityProtocol's names, each mapped to itself
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "security.inter.broker.protocol": "PLAINTEXT",  # SecurityProtocol.PLAINTEXT.toString()
    "inter.broker.protocol.version": "3.9-IV0",  # MetadataVersion.latestProduction() of Kafka 3.9
    "group.coordinator.rebalance.protocols": "classic,consumer",  # Group.GroupType CLASSIC, CONSUMER
    "group.consumer.migration.policy": "bidirectional",  # ConsumerGroupMigrationPolicy.BIDIRECTIONAL
    "log.message.format.version": "3.0-IV1",  # IBP_3_0_IV1.version()
    "metrics.recording.level": "INFO",  # Sensor.RecordingLevel.INFO.toString()
    "ssl.client.auth": "none",  # SslClientAuth.NONE.toString()
    "sasl.enabled.mechanisms": "GSSAPI",  # SaslConfigs.GSSAPI_MECHANISM
    "sasl.kerberos.principal.to.local.rules": "DEFAULT",  # KerberosName's DEFAULT rule
    "offsets.topic.compression.codec": "0",  # CompressionType.NONE.id
    "share.coordinator.state.topic.compression.codec": "0",  # CompressionType.NONE.id
}

# Keys Kafka 4.0 and 4.1 define that the source snapshot does not: (name, type, default, mode, where).
HAND_KEYS: list[tuple[str, str, str | None, str, str]] = [
]


@dataclass
class Key:
    name: str
    type: str
    default: str | None
    source: str  # the Java class that defines it
    internal: bool = False
    range: tuple[float | None, float | None] | None = None
    choices: tuple[str, ...] | None = None
    hand: bool = False
    mode: str = "read-only"


class Unevaluable(Exception):
    pass


@dataclass
class Repo:
    git_dir: str
    ref: str
    _paths: list[str] = field(default_factory=list)
    _files: dict[str, str] = field(default_factory=dict)
    _consts: dict[str, dict[str, str]] = field(default_factory=dict)

    def paths(self) -> list[str]:
        if not self._paths:
            out = subprocess.run(["git", f"--git-dir={self.git_dir}", "ls-tree", "-r", "--name-only", self.ref],
                                 check=True, capture_output=True, text=True).stdout
            self._paths = [p for p in out.splitlines() if "/src/main/" in p]
        return self._paths

    def path_of(self, cls: str, ext: str = ".java") -> str:
        found = [p for p in self.paths() if p.endswith("/" + cls + ext)]
        if len(found) != 1:
            raise SystemExit(f"gen_kafka_broker_keys: {len(found)} files for class {cls}: {found}")
        return found[0]

    def text(self, path: str) -> str:
        if path not in self._files:
            raw = subprocess.run(["git", f"--git-dir={self.git_dir}", "show", f"{self.ref}:{path}"],
                                 check=True, capture_output=True, text=True).stdout
            self._files[path] = strip_comments(raw)
        return self._files[path]

    def class_text(self, cls: str) -> str:
        return self.text(self.path_of(cls, ".scala" if cls in SCALA_CLASSES else ".java"))

    def constants(self, cls: str) -> dict[str, str]:
        """NAME -> expression text of the class's ``static final`` (and Scala ``val``) fields."""
        if cls not in self._consts:
            text = self.class_text(cls)
            consts: dict[str, str] = {}
            for m in re.finditer(r"\b(?:static\s+final|final\s+static)\s+[\w<>\[\],.? ]+?\s+(\w+)\s*=", text):
                consts.setdefault(m.group(1), text[m.end():scan_to(text, m.end(), ";")].strip())
            self._consts[cls] = consts
        return self._consts[cls]


SCALA_CLASSES = {"DynamicBrokerConfig", "SocketServer", "LogCleaner"}


def strip_comments(text: str) -> str:
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 2
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def scan_to(text: str, i: int, stop: str) -> int:
    """Index of the first ``stop`` character at bracket depth 0 from ``i``, outside strings."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0 and c in stop:
                return i
            depth -= 1
        elif depth == 0 and c in stop:
            return i
        i += 1
    raise ValueError("unterminated expression")


def split_args(text: str) -> list[str]:
    out, i = [], 0
    while i <= len(text):
        j = scan_to(text + ")", i, ",)")
        out.append(text[i:j].strip())
        i = j + 1
        if j >= len(text):
            break
    return out


_TIME = {"NANOSECONDS": 1e-6, "MICROSECONDS": 1e-3, "MILLISECONDS": 1, "SECONDS": 1000, "MINUTES": 60_000,
         "HOURS": 3_600_000, "DAYS": 86_400_000}
_TO = {"toNanos": "NANOSECONDS", "toMicros": "MICROSECONDS", "toMillis": "MILLISECONDS", "toSeconds": "SECONDS",
       "toMinutes": "MINUTES", "toHours": "HOURS", "toDays": "DAYS"}
_JAVA_CONSTS = {"Integer.MAX_VALUE": 2**31 - 1, "Integer.MIN_VALUE": -(2**31), "Long.MAX_VALUE": 2**63 - 1,
                "Long.MIN_VALUE": -(2**63), "Short.MAX_VALUE": 2**15 - 1, "Double.MAX_VALUE": 1.7976931348623157e308}
_TOKEN = re.compile(r'\s*(?:("(?:\\.|[^"\\])*")|([0-9][0-9_]*\.[0-9]+(?:[eE][-+]?[0-9]+)?[dDfF]?|[0-9][0-9_]*[lLdDfF]?)'
                    r"|([A-Za-z_][\w]*(?:\s*\.\s*[A-Za-z_]\w*)*)|(\S))")


class Evaluator:
    def __init__(self, repo: Repo) -> None:
        self.repo = repo

    def imports(self, cls: str) -> dict[str, str]:
        text = self.repo.class_text(cls)
        out = {}
        for m in re.finditer(r"^import\s+(static\s+)?([\w.]+)\s*;", text, re.M):
            parts = m.group(2).split(".")
            if m.group(1):  # import static a.b.Class.NAME
                out[parts[-1]] = parts[-2] + "." + parts[-1]
            else:
                out[parts[-1]] = m.group(2)
        return out

    def name(self, cls: str, ident: str) -> object:
        """Value of an identifier seen in class ``cls``: a constant of it, a qualified constant, ..."""
        ident = re.sub(r"\s+", "", ident)
        if ident in _JAVA_CONSTS:
            return _JAVA_CONSTS[ident]
        if ident in ("true", "false"):
            return ident == "true"
        if ident == "null":
            return None
        parts = ident.split(".")
        if len(parts) == 1:
            if ident in self.repo.constants(cls):
                return self.eval(cls, self.repo.constants(cls)[ident])
            imp = self.imports(cls).get(ident)
            if imp is not None and imp.count(".") == 1:
                return self.name(imp.split(".")[0], imp)
            raise Unevaluable(f"{cls}: {ident}")
        if len(parts) == 2 and parts[0][0].isupper():
            other = parts[0]
            try:
                consts = self.repo.constants(other)
            except SystemExit:
                raise Unevaluable(f"{cls}: {ident}") from None
            if parts[1] in consts:
                return self.eval(other, consts[parts[1]])
        raise Unevaluable(f"{cls}: {ident}")

    def eval(self, cls: str, expr: str) -> object:
        expr = re.sub(r"\(\s*(?:int|long|short|double)\s*\)", "", expr).strip()
        m = re.fullmatch(r"(\w+)\.class(?:\.getName\s*\(\s*\))?", expr)
        if m:  # a class literal: its fully qualified name, from the imports
            imp = self.imports(cls).get(m.group(1))
            if imp is None:
                raise Unevaluable(f"{cls}: {expr}")
            return imp
        m = re.fullmatch(r"Collections\.unmodifiableList\s*\((.*)\)", expr, re.S)
        if m:
            return self.eval(cls, m.group(1))
        m = re.fullmatch(r"(?:Collections\.emptyList|Collections\.singletonList|List\.of|Arrays\.asList|Set\.of)\s*\((.*)\)", expr, re.S)
        if m:
            args = [a for a in split_args(m.group(1)) if a] if m.group(1).strip() else []
            return [self.eval(cls, a) for a in args]
        m = re.fullmatch(r"String\.join\s*\((.*)\)", expr, re.S)
        if m:
            args = split_args(m.group(1))
            sep = self.eval(cls, args[0])
            items = self.eval(cls, args[1]) if len(args) == 2 and not args[1].startswith('"') else \
                [self.eval(cls, a) for a in args[1:]]
            assert isinstance(sep, str) and isinstance(items, list)
            return sep.join(str(i) for i in items)
        m = re.fullmatch(r"(?:ServerTopicConfigSynonyms\.)?serverSynonym\s*\((.*)\)", expr, re.S)
        if m:
            return topic_config_synonyms(self.repo, self)[str(self.eval(cls, m.group(1)))]
        m = re.fullmatch(r"TimeUnit\.(\w+)\.(to\w+)\s*\((.*)\)", expr, re.S)
        if m:
            n = self.eval(cls, m.group(3))
            assert isinstance(n, (int, float))
            return int(n * _TIME[m.group(1)] / _TIME[_TO[m.group(2)]])
        # Otherwise: an arithmetic / concatenation expression over literals and constants.
        py: list[str] = []
        pos = 0
        while pos < len(expr):
            t = _TOKEN.match(expr, pos)
            if t is None:
                break
            pos = t.end()
            s, num, ident, other = t.groups()
            if s is not None:
                py.append(repr(bytes(s[1:-1], "utf-8").decode("unicode_escape")))
            elif num is not None:
                py.append(num.rstrip("lLdDfF").replace("_", ""))
            elif ident is not None:
                if expr[pos:].lstrip().startswith("("):
                    raise Unevaluable(f"{cls}: call {ident}")
                py.append(repr(self.name(cls, ident)))
            elif other in "+-*/%()":
                py.append("//" if other == "/" else other)
            else:
                raise Unevaluable(f"{cls}: {expr}")
        code = " ".join(py)
        code = re.sub(r"\(\s*'?(int|long)'?\s*\)", "", code)
        try:
            return eval(code, {"__builtins__": {}})  # noqa: S307 - literals and operators only
        except Exception as e:
            raise Unevaluable(f"{cls}: {expr} ({e})") from None


def java_text(value: object, type_: str) -> str | None:
    """The default as Kafka's ConfigDef.convertToString writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if type_ == "DOUBLE":
        from strom.config._defs import java_double

        return java_double(float(value))  # type: ignore[arg-type]
    if isinstance(value, str) and type_ == "LIST":
        return ",".join(s.strip() for s in value.split(",") if s.strip())
    return str(value)


_TYPES = ("BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD")


def config_def_text(repo: Repo, ref: str) -> tuple[str, str]:
    """(class, text of the chained define calls) of one entry of AbstractKafkaConfig's list."""
    cls, _, member = ref.partition(".")
    text = repo.class_text(cls)
    if member.endswith("()"):
        m = re.search(rf"\b{re.escape(member[:-2])}\s*\(\s*\)\s*\{{\s*return\s+new\s+ConfigDef\s*\(\s*\)", text)
    else:
        m = re.search(rf"\b{re.escape(member)}\s*=\s*new\s+ConfigDef\s*\(\s*\)", text)
    if m is None:
        raise SystemExit(f"gen_kafka_broker_keys: cannot find {ref}")
    return cls, text[m.end():scan_to(text, m.end(), ";")]


def parse_defines(repo: Repo, ev: Evaluator, ref: str, unresolved: list[str]) -> list[Key]:
    cls, text = config_def_text(repo, ref)
    keys = []
    for m in re.finditer(r"\.(define|defineInternal)\s*\(", text):
        args = split_args(text[m.end():scan_to(text, m.end(), ")")])
        name = ev.eval(cls, args[0])
        assert isinstance(name, str), args[0]
        type_ = args[1].split(".")[-1]
        assert type_ in _TYPES, (name, args[1])
        key = Key(name, type_, None, cls, internal=m.group(1) == "defineInternal")
        if args[2].split(".")[-1] in ("HIGH", "MEDIUM", "LOW"):
            key.default = None  # required, no default (Kafka's NO_DEFAULT_VALUE); none of the broker's
        elif name in HAND_DEFAULTS:
            key.default, key.hand = HAND_DEFAULTS[name], True
        else:
            try:
                key.default = java_text(ev.eval(cls, args[2]), type_)
            except Unevaluable as e:
                unresolved.append(f"{name}: {e}")
        if len(args) > 4 and args[3].split(".")[-1] not in ("HIGH", "MEDIUM", "LOW"):
            parse_validator(ev, cls, args[3], key)
        keys.append(key)
    return keys


def parse_validator(ev: Evaluator, cls: str, text: str, key: Key) -> None:
    try:
        m = re.fullmatch(r"(?:ConfigDef\.)?(?:Range\.)?(atLeast|between)\s*\((.*)\)", text, re.S)
        if m:
            bounds = [ev.eval(cls, a) for a in split_args(m.group(2))]
            assert all(isinstance(b, (int, float)) for b in bounds)
            key.range = (bounds[0], bounds[1] if m.group(1) == "between" else None)  # type: ignore[assignment]
            return
        m = re.fullmatch(r"(?:ConfigDef\.)?ValidString\.in\s*\((.*)\)", text, re.S)
        if m:
            values = [ev.eval(cls, a) for a in split_args(m.group(1))]
            if all(isinstance(v, str) for v in values):
                key.choices = tuple(values)  # type: ignore[arg-type]
    except Unevaluable:
        pass


def scala_set(repo: Repo, ev: Evaluator, cls: str, obj: str | None, member: str) -> set[str]:
    """Names in a Scala ``val member = Set(...)`` (inside ``object obj`` when given)."""
    text = repo.class_text(cls)
    if obj is not None:
        text = text[re.search(rf"\bobject\s+{obj}\b", text).start():]  # type: ignore[union-attr]
    m = re.search(rf"\bval\s+{member}\s*(?::[^=]*)?=\s*Set\s*\(", text)
    assert m is not None, (cls, obj, member)
    args = split_args(text[m.end():scan_to(text, m.end(), ")")])
    out = set()
    for a in args:
        owner, _, name = re.sub(r"\s+", "", a).partition(".")
        value = ev.name(owner, a) if owner[0].isupper() else None
        assert isinstance(value, str), a
        out.add(value)
    return out


def java_set(repo: Repo, ev: Evaluator, cls: str, member: str) -> set[str]:
    expr = repo.constants(cls)[member]
    value = ev.eval(cls, expr)
    assert isinstance(value, list)
    return {str(v) for v in value}


_SYNONYMS: dict[str, str] = {}


def topic_config_synonyms(repo: Repo, ev: Evaluator) -> dict[str, str]:
    """ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS: topic config -> its first broker synonym."""
    if not _SYNONYMS:
        _SYNONYMS.update(_topic_config_synonyms(repo, ev))
    return _SYNONYMS


def _topic_config_synonyms(repo: Repo, ev: Evaluator) -> dict[str, str]:
    cls = "ServerTopicConfigSynonyms"
    text = repo.class_text(cls)
    m = re.search(r"ALL_TOPIC_CONFIG_SYNONYMS\s*=.*?mkMap\s*\(", text, re.S)
    assert m is not None
    out = {}
    for entry in split_args(text[m.end():scan_to(text, m.end(), ")")]):
        fn, _, rest = entry.partition("(")
        args = split_args(rest[:rest.rindex(")")])
        topic = ev.eval(cls, args[0])
        assert isinstance(topic, str)
        first = None
        if len(args) > 1:
            arg = re.sub(r"^new\s+ConfigSynonym\s*\(", "", args[1])
            first = ev.eval(cls, split_args(arg.rstrip(")"))[0] if arg != args[1] else arg)
        prefix = {"sameName": "", "single": "", "sameNameWithLogPrefix": "log.", "listWithLogPrefix": "log.",
                  "singleWithLogPrefix": "log.", "sameNameWithLogCleanerPrefix": "log.cleaner.",
                  "singleWithLogCleanerPrefix": "log.cleaner."}[fn.strip()]
        out[topic] = prefix + str(first if first is not None else topic)
    return out


def dynamic_modes(repo: Repo, ev: Evaluator) -> dict[str, str]:
    """Kafka's DynamicBrokerConfig.dynamicConfigUpdateModes (every other key is read-only)."""
    dbc = "DynamicBrokerConfig"
    security = java_set(repo, ev, "SslConfigs", "RECONFIGURABLE_CONFIGS")
    listener = scala_set(repo, ev, dbc, "DynamicListenerConfig", "ReconfigurableConfigs")
    synonyms = topic_config_synonyms(repo, ev)
    log_configs = {v for k, v in synonyms.items() if k != "message.format.version"}
    metric_reporters = ev.name("MetricConfigs", "METRIC_REPORTER_CLASSES_CONFIG")
    assert isinstance(metric_reporters, str)
    all_dynamic = (security | scala_set(repo, ev, "LogCleaner", "LogCleaner", "ReconfigurableConfigs") | log_configs
                   | scala_set(repo, ev, dbc, "DynamicThreadPool", "ReconfigurableConfigs") | {metric_reporters}
                   | listener | scala_set(repo, ev, "SocketServer", "SocketServer", "ReconfigurableConfigs")
                   | scala_set(repo, ev, dbc, "DynamicBrokerConfig", "DynamicProducerStateManagerConfig")
                   | scala_set(repo, ev, dbc, "DynamicRemoteLogConfig", "ReconfigurableConfigs"))
    cluster_level = scala_set(repo, ev, dbc, "DynamicBrokerConfig", "ClusterLevelListenerConfigs")
    per_broker = (security | listener) - cluster_level
    return {name: "per-broker" if name in per_broker else "cluster-wide" for name in all_dynamic}


def config_def_list(repo: Repo) -> list[str]:
    text = repo.class_text("AbstractKafkaConfig")
    m = re.search(r"CONFIG_DEF\s*=\s*Utils\.mergeConfigs\s*\(\s*(?:Arrays\.asList|List\.of)\s*\(", text)
    assert m is not None
    return [re.sub(r"\s+", "", a) for a in split_args(text[m.end():scan_to(text, m.end(), ")")])]


def generate(git_dir: str, ref: str) -> str:
    repo = Repo(git_dir, ref)
    ev = Evaluator(repo)
    commit = subprocess.run(["git", f"--git-dir={git_dir}", "log", "-1", "--format=%H %cs", ref], check=True,
                            capture_output=True, text=True).stdout.split()
    version = re.search(r"^version=(\S+)", subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{ref}:gradle.properties"], check=True, capture_output=True,
        text=True).stdout, re.M)
    unresolved: list[str] = []
    keys: dict[str, Key] = {}
    for ref_name in config_def_list(repo):
        for key in parse_defines(repo, ev, ref_name, unresolved):
            keys.setdefault(key.name, key)
    if unresolved:
        raise SystemExit("gen_kafka_broker_keys: defaults not evaluated (add them to HAND_DEFAULTS):\n  "
                         + "\n  ".join(unresolved))
    for name, mode in dynamic_modes(repo, ev).items():
        if name in keys:
            keys[name].mode = mode
    for name, type_, default, mode, where in HAND_KEYS:
        if name not in keys:
            keys[name] = Key(name, type_, default, where, hand=True, mode=mode)
    lines = [
        f"# Generated by tools/gen_kafka_broker_keys.py from apache/kafka {commit[0]} ({commit[1]}, "
        f"{version.group(1) if version else '?'}):",
        "# AbstractKafkaConfig.CONFIG_DEF's .define calls and DynamicBrokerConfig's sets. Do not edit by hand:",
        "# change the generator (its HAND_DEFAULTS and HAND_KEYS are the hand-recorded entries, marked `hand`)",
        "# and run it again.",
        '"""Every broker config key Kafka defines: name, type, default (as Kafka prints it, None = null), dynamic',
        "update mode (read-only, per-broker, cluster-wide), the Kafka class that defines it, and simple",
        'validators. Generated; see the header."""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import NamedTuple",
        "",
        "",
        "class KafkaKey(NamedTuple):",
        "    name: str",
        "    type: str",
        "    default: str | None",
        "    mode: str",
        "    source: str",
        "    min: float | None = None",
        "    max: float | None = None",
        "    choices: tuple[str, ...] | None = None",
        "    internal: bool = False",
        "    hand: bool = False",
        "",
        "",
        "# fmt: off",
        "KAFKA_BROKER_KEYS: tuple[KafkaKey, ...] = (",
    ]
    for k in sorted(keys.values(), key=lambda k: k.name):
        extra = []
        if k.range is not None:
            extra.append(f"min={k.range[0]!r}")
            if k.range[1] is not None:
                extra.append(f"max={k.range[1]!r}")
        if k.choices is not None:
            extra.append(f"choices={k.choices!r}")
        if k.internal:
            extra.append("internal=True")
        if k.hand:
            extra.append("hand=True")
        args = ", ".join([repr(k.name), repr(k.type), repr(k.default), repr(k.mode), repr(k.source), *extra])
        lines.append(f"    KafkaKey({args}),")
    lines += [")", "# fmt: on", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--git-dir", default="/work/.mirror/apache+kafka/repo")
    p.add_argument("--ref", default="HEAD")
    p.add_argument("--out", type=Path, default=OUT)
    ns = p.parse_args(argv)
    ns.out.write_text(generate(ns.git_dir, ns.ref), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
