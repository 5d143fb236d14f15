"""YAML loading that remembers where each key stood, so errors can name file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple

import yaml

KeyPath = Tuple[str, ...]


class YamlError(ValueError):
    pass


def load_with_lines(path: Path) -> Tuple[Any, Dict[KeyPath, int]]:
    """The document as plain Python objects, and the 1-based line of every mapping key."""
    try:
        with open(path) as f:
            node = yaml.compose(f)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise YamlError(f"{where}: not valid YAML: {getattr(e, 'problem', e)}") from None
    lines: Dict[KeyPath, int] = {}
    return (_convert(node, (), lines) if node is not None else {}), lines


def _convert(node, path: KeyPath, lines: Dict[KeyPath, int]):
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = str(yaml.safe_load(yaml.serialize(key_node)))
            lines[path + (key,)] = key_node.start_mark.line + 1
            out[key] = _convert(value_node, path + (key,), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(v, path + (str(i),), lines) for i, v in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))
