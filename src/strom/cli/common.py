"""Shared pieces of the client commands (topics, produce, consume, groups, configs, bench, demo): the
connection options, client configs built on confluent-kafka, a bounded reachability check and
one-line error reporting.

Every client command fails with one line on stderr and a non-zero exit: 1 for a runtime failure
(broker unreachable, missing topic, refused request), 2 for a bad command line. Set STROM_DEBUG=1
to see librdkafka's log and Python tracebacks instead.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

if TYPE_CHECKING:  # rich is imported where output is printed: `strom broker` starts without it
    from rich.console import Console

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_CONNECT_TIMEOUT = 8.0
BOOTSTRAP_ENVVAR = "STROM_BOOTSTRAP_SERVER"


def debug_enabled() -> bool:
    return os.environ.get("STROM_DEBUG", "") not in ("", "0")


# --------------------------------------------------------------------------------------------------
# Errors: one line, non-zero exit


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class Failure(click.ClickException):
    """A runtime failure reported as ``Error: <message>`` on stderr, exit code 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message))


class OneLineUsageError(click.UsageError):
    """A bad command line, reported in one line (click's default prints usage and a hint as well)."""

    def show(self, file: Any = None) -> None:
        hint = f" (try '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"Error: {_one_line(self.format_message())}{hint}", err=True)


def _convert_usage_error(e: click.UsageError) -> click.UsageError:
    if isinstance(e, OneLineUsageError | click.exceptions.NoArgsIsHelpError):
        return e
    return OneLineUsageError(e.format_message(), e.ctx or click.get_current_context(silent=True))


def _silence_stdout() -> None:
    """After a broken pipe (``strom consume ... | head``): point stdout at /dev/null so the interpreter's
    final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _run_guarded(invoke: Callable[[], Any]) -> Any:
    from confluent_kafka import KafkaException

    try:
        return invoke()
    except click.UsageError as e:
        raise _convert_usage_error(e) from None
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except KafkaException as e:
        if debug_enabled():
            raise
        raise Failure(kafka_error_message(e.args[0] if e.args else e)) from None
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130) from None
    except BrokenPipeError:
        _silence_stdout()
        raise click.exceptions.Exit(0) from None
    except Exception as e:
        if debug_enabled():
            raise
        raise Failure(f"unexpected {type(e).__name__}: {e} (set STROM_DEBUG=1 for details)") from None


class StromCommand(click.Command):
    """A click command whose usage errors and failures are one line, never a traceback."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            raise _convert_usage_error(e) from None

    def invoke(self, ctx: click.Context) -> Any:
        return _run_guarded(lambda: super(StromCommand, self).invoke(ctx))


class StromGroup(StromCommand, click.Group):
    """A command group with the same one-line errors (also for an unknown subcommand): StromCommand's
    parse_args and invoke wrap click.Group's."""

    command_class = StromCommand


# --------------------------------------------------------------------------------------------------
# Connection options and client configs


@dataclass(frozen=True)
class ClientOptions:
    bootstrap: str = DEFAULT_BOOTSTRAP
    properties: dict[str, str] = field(default_factory=dict)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT


def parse_key_value(text: str, option: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint=option)
    return key, value


def parse_key_values(values: Iterable[str], option: str) -> list[tuple[str, str]]:
    return [parse_key_value(v, option) for v in values]


# The connection options, defined once: every command that talks to a broker takes them, and so do
# the groups above it (``strom`` itself, ``strom topics``, ``strom groups``, ...), so that
# ``strom groups describe G -b HOST:PORT`` and ``strom groups -b HOST:PORT describe G`` both work.
_BOOTSTRAP, _PROPERTIES, _TIMEOUT = "bootstrap_server", "client_properties", "connect_timeout"
CONNECTION_PARAMS = (_BOOTSTRAP, _PROPERTIES, _TIMEOUT)


def _connection_option_decorators() -> list[Callable[[Callable[..., Any]], Callable[..., Any]]]:
    return [
        click.option(
            "-b", "--bootstrap-server", _BOOTSTRAP, default=DEFAULT_BOOTSTRAP, show_default=True,
            envvar=BOOTSTRAP_ENVVAR, show_envvar=True, metavar="HOST:PORT[,...]", help="Broker(s) to connect to.",
        ),
        click.option(
            "-X", "--property", _PROPERTIES, multiple=True, metavar="KEY=VALUE",
            help="librdkafka client property (repeatable), e.g. -X security.protocol=SASL_SSL.",
        ),
        click.option(
            "--connect-timeout", _TIMEOUT, type=click.FloatRange(min=0.5), default=DEFAULT_CONNECT_TIMEOUT,
            show_default=True, metavar="SECONDS", help="Give up on an unreachable broker after this long.",
        ),
    ]


def _with_connection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_connection_option_decorators()):
        f = option(f)
    return f


def connection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The connection options on a command group: parsed there and left in the group's context for
    its subcommands to read (see resolve_client_options); the group's own function does not see them."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for name in CONNECTION_PARAMS:
            kwargs.pop(name, None)
        return f(*args, **kwargs)

    return _with_connection_options(wrapper)


def client_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The connection options on a command that talks to a broker; it receives them, merged with any
    given to the groups above it, as one ``client: ClientOptions`` argument."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for name in CONNECTION_PARAMS:
            kwargs.pop(name, None)
        return f(*args, client=resolve_client_options(click.get_current_context()), **kwargs)

    return _with_connection_options(wrapper)


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE


def resolve_client_options(ctx: click.Context) -> ClientOptions:
    """The connection settings for the command running in ``ctx``.

    A value typed nearest the command wins (``strom topics list -b A`` over ``strom topics -b B
    list`` over ``strom -b C topics list``), then $STROM_BOOTSTRAP_SERVER, then the default.
    -X properties add up across the levels, key by key, the nearest winning.
    """
    levels: list[click.Context] = []  # outermost first
    c: click.Context | None = ctx
    while c is not None:
        if _BOOTSTRAP in c.params:
            levels.insert(0, c)
        c = c.parent
    bootstrap = os.environ.get(BOOTSTRAP_ENVVAR) or DEFAULT_BOOTSTRAP
    timeout = DEFAULT_CONNECT_TIMEOUT
    properties: dict[str, str] = {}
    for level in levels:
        if _given(level, _BOOTSTRAP):
            bootstrap = level.params[_BOOTSTRAP]
        if _given(level, _TIMEOUT):
            timeout = level.params[_TIMEOUT]
        properties.update(parse_key_values(level.params[_PROPERTIES], "-X/--property"))
    return ClientOptions(bootstrap, properties, timeout)


_quiet_logger: logging.Logger | None = None


def _librdkafka_logger() -> logging.Logger:
    """librdkafka logs to stderr by default; route it to a logger that only speaks with STROM_DEBUG=1."""
    global _quiet_logger
    if _quiet_logger is None:
        _quiet_logger = logging.getLogger("strom.cli.librdkafka")
        _quiet_logger.propagate = False
        if debug_enabled():
            handler: logging.Handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
            _quiet_logger.setLevel(logging.DEBUG)
        else:
            handler = logging.NullHandler()
        _quiet_logger.addHandler(handler)
    return _quiet_logger


def base_config(opts: ClientOptions, **overrides: Any) -> dict[str, Any]:
    timeout_ms = int(opts.connect_timeout * 1000)
    config: dict[str, Any] = {
        "bootstrap.servers": opts.bootstrap,
        "client.id": "strom-cli",
        "socket.connection.setup.timeout.ms": max(1000, timeout_ms),
        "logger": _librdkafka_logger(),
        # Looking a topic up must never create it: only the producer opts back in.
        "allow.auto.create.topics": False,
    }
    config.update(overrides)
    config.update(opts.properties)
    return java_style_properties(config)


def raw_security(opts: ClientOptions) -> Any:
    """TLS and SASL settings of -X for the CLI's raw connections (client/raw_connection.py)."""
    from strom.security.client_properties import client_security

    try:
        return client_security(opts.properties)
    except (ValueError, OSError) as e:
        raise Failure(f"-X {e}") from None


def java_style_properties(config: dict[str, Any]) -> dict[str, Any]:
    """Security settings written for Kafka's Java client (sasl.jaas.config, PEM truststore/keystore
    locations) in librdkafka's terms; one-line failure for what cannot be used."""
    from strom.security.client_properties import librdkafka_properties

    try:
        return librdkafka_properties(config)
    except ValueError as e:
        raise Failure(f"-X {e}") from None


def admin_client(opts: ClientOptions) -> Any:
    from confluent_kafka.admin import AdminClient

    check_reachable(opts)
    try:
        return AdminClient(base_config(opts))
    except Exception as e:  # bad -X property
        raise Failure(f"cannot create client: {e}") from None


# --------------------------------------------------------------------------------------------------
# Reachability and metadata


def bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for item in bootstrap.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise Failure(f"bad bootstrap server {item!r}: expected HOST:PORT")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise Failure("no bootstrap server given")
    return out


def check_reachable(opts: ClientOptions) -> None:
    """Fail fast, in one line, when no bootstrap address accepts a TCP connection."""
    reasons: list[str] = []
    for host, port in bootstrap_addresses(opts.bootstrap):
        try:
            with socket.create_connection((host, port), timeout=min(opts.connect_timeout, 10.0)):
                return
        except TimeoutError:
            reasons.append(f"no answer within {opts.connect_timeout:g}s")
        except OSError as e:
            reasons.append((e.strerror or str(e)).lower())
    raise Failure(f"cannot reach broker at {opts.bootstrap} ({'; '.join(dict.fromkeys(reasons))})")


def kafka_error_message(err: Any) -> str:
    """A KafkaError (or anything) as one readable line."""
    text = err.str() if hasattr(err, "str") else str(err)
    name = err.name() if hasattr(err, "name") else ""
    if name and name not in text:
        text = f"{text} ({name})"
    return _one_line(text)


def is_unsupported(err: Any) -> bool:
    from confluent_kafka import KafkaError

    code = err.code() if hasattr(err, "code") else None
    return code in (KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION)


def fetch_metadata(client: Any, opts: ClientOptions, topic: str | None = None) -> Any:
    """Cluster metadata (optionally for one topic), bounded by the connect timeout."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        return client.list_topics(topic, timeout=opts.connect_timeout)
    except KafkaException as e:
        err = e.args[0]
        if err.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN):
            raise Failure(f"cannot reach broker at {opts.bootstrap} (no metadata within "
                          f"{opts.connect_timeout:g}s: {err.str()})") from None
        raise Failure(f"cannot get metadata from {opts.bootstrap}: {kafka_error_message(err)}") from None


def topic_metadata(client: Any, opts: ClientOptions, topic: str, retries: float = 5.0) -> Any:
    """The topic's metadata, or a one-line failure if it does not exist. A topic that is being created
    (LEADER_NOT_AVAILABLE) is waited for up to ``retries`` seconds."""
    import time

    from confluent_kafka import KafkaError

    deadline = time.monotonic() + retries
    while True:
        md = fetch_metadata(client, opts, topic)
        tmd = md.topics.get(topic)
        err = tmd.error if tmd is not None else None
        if tmd is None or (err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise Failure(f"topic '{topic}' does not exist")
        if err is None and tmd.partitions:
            return tmd
        if time.monotonic() > deadline:
            if err is not None:
                raise Failure(f"topic '{topic}': {kafka_error_message(err)}")
            raise Failure(f"topic '{topic}' has no partitions")
        time.sleep(0.2)


# --------------------------------------------------------------------------------------------------
# Output


def out_console() -> Console:
    """Console for results on stdout; wide when piped so tables are not squeezed to 80 columns."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    return Console(width=max(shutil.get_terminal_size((200, 24)).columns, 200), color_system=None,
                   soft_wrap=False)


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def note(message: str) -> None:
    """A status line on stderr (keeps stdout clean for data)."""
    err_console().print(message, markup=False)
