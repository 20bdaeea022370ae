"""The `strom` command."""

from __future__ import annotations

import logging
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
        if b.config.admin_listeners:
            from strom.admin.server import attach  # aiohttp & co. only for a broker that serves HTTP

            attach(b)
        else:
            logging.getLogger("strom.admin").info("admin listener disabled (admin.listeners is empty)")
        attach_from_environment(b)  # only a broker strom.testing started (see broker/faults.py)

    run_broker(config, setup=setup)


def _register_commands() -> None:
    """Command families live in their own modules; each adds one line here."""
    # (registrations)
    from strom.cli.topics import topics; cli.add_command(topics)  # noqa: E702, I001
    from strom.cli.reassign import reassign; topics.add_command(reassign)  # noqa: E702, I001
    from strom.cli.produce import produce; cli.add_command(produce)  # noqa: E702, I001
    from strom.cli.consume import consume; cli.add_command(consume)  # noqa: E702, I001
    from strom.cli.groups import groups; cli.add_command(groups)  # noqa: E702, I001
    from strom.cli.transactions import transactions; cli.add_command(transactions)  # noqa: E702, I001
    from strom.cli.configs import configs; cli.add_command(configs)  # noqa: E702, I001
    from strom.cli.cluster import cluster; cli.add_command(cluster)  # noqa: E702, I001
    from strom.bench.cli import bench; cli.add_command(bench)  # noqa: E702, I001
    from strom.demo.cli import demo; cli.add_command(demo)  # noqa: E702, I001
    from strom.cli.dev_cluster import dev_cluster; cli.add_command(dev_cluster)  # noqa: E702, I001


_register_commands()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
