"""`--set KEY.PATH=VALUE`, the one override syntax of every command: the value is read as
YAML, so 8, true, null (None), [1, 2] and H200 mean what they would in a workload file."""

from __future__ import annotations

from typing import Any, Tuple


def parse_set(item: str) -> Tuple[Tuple[str, ...], Any]:
    """`a.b=value` -> (("a", "b"), value); ValueError naming the item otherwise."""
    import yaml

    key, sep, raw = item.partition("=")
    parts = tuple(key.split("."))
    if not sep or not all(parts):
        raise ValueError(f"--set {item!r}: expected KEY.PATH=VALUE")
    try:
        return parts, yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ValueError(f"--set {item!r}: the value is not valid YAML ({e.problem})") from None
