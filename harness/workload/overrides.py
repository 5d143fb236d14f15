"""`--set KEY.PATH=VALUE`, the one override syntax of every command: the value is read as
YAML, so 8, true, null (None), [1, 2] and H200 mean what they would in a workload file."""

from __future__ import annotations

from typing import Any, Tuple


def parse_set(item: str) -> Tuple[Tuple[str, ...], Any]:
    """`a.b=value` -> (("a", "b"), value); ValueError naming the item otherwise."""
    from engine.yaml_lines import YamlError, load_value

    key, sep, raw = item.partition("=")
    parts = tuple(key.split("."))
    if not sep or not all(parts):
        raise ValueError(f"--set {item!r}: expected KEY.PATH=VALUE")
    try:
        return parts, load_value(raw, f"--set {item!r}")
    except YamlError as e:
        raise ValueError(str(e)) from None
