"""Kafka's kafka-topics.sh and kafka-acls.sh as librdkafka's tests call them, answered by strom's CLI.

Some of librdkafka's tests change topics and ACLs through the Kafka distribution's scripts
(``$KAFKA_PATH/bin/kafka-topics.sh --bootstrap-server $BROKERS --create --topic t ...``,
``kafka-acls.sh --add --deny-principal 'User:*' ...``). tests/rdkafka_runner.py puts two small
scripts of those names in a ``bin/`` of its own that run this module, which translates the options
those tests use into `strom topics` and `strom acls` commands and exits with their exit code.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator


def _values(args: list[str]) -> Iterator[tuple[str, str | None]]:
    """(option, value) pairs; value None for a flag."""
    flags = {"--create", "--alter", "--delete", "--list", "--describe", "--add", "--remove", "--force",
             "--if-not-exists", "--if-exists", "--cluster"}
    i = 0
    while i < len(args):
        opt = args[i]
        if opt in flags:
            yield opt, None
            i += 1
        elif opt.startswith("--") and "=" in opt:
            key, _, value = opt.partition("=")
            yield key, value
            i += 1
        elif opt.startswith("--") and i + 1 < len(args):
            yield opt, args[i + 1]
            i += 2
        else:
            raise SystemExit(f"kafka tool shim: unsupported argument {opt!r}")


def topics_command(args: list[str]) -> list[str]:
    bootstrap, action, names, rest = "127.0.0.1:9092", None, [], []
    for opt, value in _values(args):
        if opt == "--bootstrap-server" and value:
            bootstrap = value
        elif opt in ("--create", "--alter", "--delete", "--list", "--describe"):
            action = opt[2:]
        elif opt == "--topic" and value:
            names.append(value)
        elif opt in ("--partitions", "--replication-factor", "--config") and value:
            rest += [opt, value]
        elif opt in ("--if-not-exists", "--if-exists"):
            rest.append(opt)
        elif opt != "--force":
            raise SystemExit(f"kafka-topics.sh shim: unsupported option {opt}")
    if action is None:
        raise SystemExit("kafka-topics.sh shim: one of --create, --alter, --delete, --list, --describe")
    return ["topics", "-b", bootstrap, action, *names, *rest]


def acls_command(args: list[str]) -> list[str]:
    bootstrap, action, rest = "127.0.0.1:9092", None, []
    for opt, value in _values(args):
        if opt == "--bootstrap-server" and value:
            bootstrap = value
        elif opt in ("--add", "--remove", "--list"):
            action = opt[2:]
        elif opt in ("--allow-host", "--deny-host") and value:
            rest += ["--host", value]  # strom takes one --host for allow and deny ACLs alike
        elif opt in ("--allow-principal", "--deny-principal", "--operation", "--topic", "--group",
                     "--transactional-id", "--resource-pattern-type") and value:
            rest += [opt, value]
        elif opt == "--cluster":
            rest.append(opt)
        elif opt != "--force":
            raise SystemExit(f"kafka-acls.sh shim: unsupported option {opt}")
    if action is None:
        raise SystemExit("kafka-acls.sh shim: one of --add, --remove, --list")
    return ["acls", action, "-b", bootstrap, *rest]


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    command = {"kafka-topics.sh": topics_command, "kafka-acls.sh": acls_command}[tool](args)
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *command]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
