"""The `strom` command."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from strom.cli.common import CONNECTION_PARAMS, connection_options


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


class LazyGroup(click.Group):
    """click's documented pattern for subcommands loaded on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = LAZY_COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, attribute = target.split(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="strom")
@connection_options
def cli() -> None:
    """strom: a Kafka-compatible streaming platform.

    The connection options given here apply to every client command below; the same options given
    after a command win over them.
    """


@cli.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
              help="Kafka-style server.properties file.")
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Set a config property (repeatable); wins over the file.")
@click.option("--log-level", default="INFO", show_default=True)
@click.pass_context
def broker(ctx: click.Context, config_path: Path | None, overrides: tuple[str, ...], log_level: str) -> None:
    """Run a broker (default: PLAINTEXT on 127.0.0.1:9092, data in ./strom-data)."""
    from strom.config import BrokerConfig, ConfigError

    # `strom -b HOST:PORT broker` looks like it sets the broker's address, but it would not.
    given = [name for name in CONNECTION_PARAMS
             if ctx.parent is not None and ctx.parent.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError("the connection options are for client commands; the broker's own address is "
                               "set with --override listeners=PLAINTEXT://HOST:PORT")
    _setup_logging(log_level)
    try:
        config = BrokerConfig.load(config_path, overrides)
    except ConfigError as e:
        click.echo(f"strom: {e}", err=True)
        sys.exit(2)
    from strom.broker.faults import attach_from_environment
    from strom.broker.server import run_broker

    def setup(b: Any) -> None:
        admin = None
        if b.config.admin_listeners:
            from strom.admin.server import attach  # aiohttp & co. only for a broker that serves HTTP

            admin = attach(b)
        else:
            logging.getLogger("strom.admin").info("admin listener disabled (admin.listeners is empty)")
        if b.config.schema_registry_listeners:
            from strom.admin.registry import attach as attach_registry  # fastavro & co. only when it is on

            registry = attach_registry(b)
            if admin is not None:
                admin.schema_reader = registry.registry  # the console's schemas page reads it directly
        attach_from_environment(b)  # only a broker strom.testing started (see broker/faults.py)

    run_broker(config, setup=setup)
    # Stopped cleanly: every file is written and closed. Exit without the interpreter's teardown,
    # which frees every object one at a time (over half a second with tens of thousands of
    # partitions) and has nothing left to save.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# Command families live in their own modules, imported only when their command runs (so that
# `strom broker` does not pay for rich, the bench or the demo at start): name -> "module:attribute".
LAZY_COMMANDS: dict[str, str] = {
    "topics": "strom.cli.topics:topics",
    "produce": "strom.cli.produce:produce",
    "consume": "strom.cli.consume:consume",
    "groups": "strom.cli.groups:groups",
    "transactions": "strom.cli.transactions:transactions",
    "configs": "strom.cli.configs:configs",
    "cluster": "strom.cli.cluster:cluster",
    "acls": "strom.cli.acls:acls",
    "users": "strom.cli.users:users",
    "quotas": "strom.cli.quotas:quotas",
    "schemas": "strom.cli.schemas:schemas",
    "bench": "strom.bench.cli:bench",
    "demo": "strom.demo.cli:demo",
    "dev-cluster": "strom.cli.dev_cluster:dev_cluster",
}


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
