"""Render the config tables of docs/configuration.md from the definitions, so the two never drift.

    python -m strom.config.docs docs/configuration.md    # rewrite the generated sections in place
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

from ._defs import ConfigDef
from .definitions import (
    BROKER_CONFIGS,
    KAFKA_ONLY_CONFIGS,
    KAFKA_ONLY_MODES,
    KAFKA_ONLY_REFUSALS,
    TOPIC_CONFIGS,
)
from .kafka_broker_keys import KAFKA_BROKER_KEYS
from .kafka_only import STROM_VALUES, family_of


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(d: ConfigDef) -> str:
    text = "null" if d.default is None else (f"`{d.default}`" if d.default else '`""`')
    if d.kafka_default is not None:
        text += f" (Kafka: {d.kafka_default})"
    return text


def _valid(d: ConfigDef) -> str:
    return _cell(d.validator.describe()) if d.validator is not None else ""


def _broker_rows(defs: Iterable[ConfigDef]) -> list[str]:
    rows = [
        "| Key | Type | Default | Valid values | Topic config | Description |",
        "|---|---|---|---|---|---|",
    ]
    for d in defs:
        topic = f"`{d.topic_config}`" if d.topic_config else ""
        rows.append(
            f"| `{d.name}` | {d.type.name.lower()} | {_default(d)} | {_valid(d)} | {topic} | {_cell(d.doc)} |"
        )
    return rows


def _topic_rows(defs: Iterable[ConfigDef]) -> list[str]:
    rows = [
        "| Key | Type | Kafka default | Valid values | Broker default from | Description |",
        "|---|---|---|---|---|---|",
    ]
    for d in defs:
        syn = ", ".join(f"`{s}`" for s in d.synonyms)
        note = " (deprecated, accepted, no effect)" if d.deprecated else " (accepted, ignored)" if d.ignored else ""
        rows.append(
            f"| `{d.name}` | {d.type.name.lower()} | {_default(d)} | {_valid(d)} | {syn} | {_cell(d.doc)}{note} |"
        )
    return rows


def _ignored_row(d: ConfigDef) -> str:
    row = f"- `{d.name}`: {d.doc}"
    if d.deprecated is not None:
        row += f" Setting it logs one warning naming it; {d.deprecated}."
    return row


def _kafka_only_rows() -> list[str]:
    rows = [
        "| Key | Type | Kafka default | Valid values | Kafka can change it | strom takes |",
        "|---|---|---|---|---|---|",
    ]
    keys = {k.name: k for k in KAFKA_BROKER_KEYS}
    for d in KAFKA_ONLY_CONFIGS:
        family = family_of(keys[d.name])
        takes = "Kafka's default only" if d.name in KAFKA_ONLY_REFUSALS else \
            f"any value, no effect ({family.feature if family else ''})"
        kafka_default = _default(d)
        if d.name in STROM_VALUES:
            value, why = STROM_VALUES[d.name]
            takes = f"{value} only ({why})"
            kafka_default = f"`{keys[d.name].default}`"
        mode = KAFKA_ONLY_MODES[d.name]
        rows.append(f"| `{d.name}` | {d.type.name.lower()} | {kafka_default} | {_valid(d)} | "
                    f"{'no' if mode == 'read-only' else mode} | {_cell(takes)} |")
    return rows


def render() -> dict[str, str]:
    """Section name -> generated markdown (without the marker lines)."""
    ignored = [d for d in BROKER_CONFIGS if d.ignored] + [d for d in TOPIC_CONFIGS if d.ignored]
    return {
        "broker-configs": "\n".join(_broker_rows(d for d in BROKER_CONFIGS if not d.ignored)),
        "topic-configs": "\n".join(_topic_rows(TOPIC_CONFIGS)),
        "ignored-configs": "\n".join(_ignored_row(d) for d in ignored),
        "kafka-only-configs": "\n".join(_kafka_only_rows()),
    }


def _pattern(section: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- BEGIN generated: {section} -->)(.*?)(<!-- END generated: {section} -->)", re.DOTALL
    )


def generated_sections(text: str) -> dict[str, str]:
    """The generated sections as they currently stand in a document."""
    out = {}
    for section in render():
        m = _pattern(section).search(text)
        if m is not None:
            out[section] = m.group(2).strip("\n")
    return out


def update(text: str) -> str:
    for section, body in render().items():

        def fill(m: re.Match[str], body: str = body) -> str:
            return m.group(1) + "\n" + body + "\n" + m.group(3)

        text = _pattern(section).sub(fill, text)
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m strom.config.docs docs/configuration.md", file=sys.stderr)
        return 2
    path = Path(argv[0])
    path.write_text(update(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
