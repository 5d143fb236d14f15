"""YAML loading that remembers where each key stood, so errors can name file and line.

Workloads, `--set` values, model files and device profiles are plain data, so the loader is
PyYAML's SafeLoader with YAML 1.2's number rules (YAML 1.1's, PyYAML's own, read `1e-9` and
`1.0e300` as strings and `012` as octal), and refuses:

- aliases (`*name`, and so `<<: *name` merges), while composing, at the first one and
  before anything is expanded: a few hundred bytes of nested aliases ("billion laughs")
  expand to billions of values;
- nesting deeper than MAX_DEPTH, and tags, on mappings, sequences and scalars alike
  (`!!map`, `!!omap`, `!!set`, `!!binary`, `!!timestamp`, `!!str`, `!custom`), also while
  composing (the composer recurses; a scalar's tag would make it bytes, a date or an
  object);
- then, while the nodes (now a tree as long as the text) become values: a mapping that
  names a key twice (two `engine:` blocks; YAML keeps the last silently), merge keys, keys
  that are not plain scalars.
"""

from __future__ import annotations

import copy
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Tuple

import yaml

KeyPath = Tuple[str, ...]
MAX_DEPTH = 64


class YamlError(ValueError):
    pass


class _Refused(yaml.MarkedYAMLError):
    """What the loader refuses, with the mark (line) of the node refused."""


# YAML 1.2's core schema: decimal, 0o octal and 0x hexadecimal integers; floats with an
# optional fraction and an exponent of optional sign. Booleans and null stay YAML 1.1's.
INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
FLOAT_12 = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                      r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
INT_TAG, FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"


def _int_12(loader, node) -> int:
    text = loader.construct_scalar(node)
    base = {"0o": 8, "0x": 16}.get(text[:2], 10)
    return int(text[2:] if base != 10 else text, base)


class _Loader(yaml.SafeLoader):
    _depth = 0
    at_line = True  # messages name lines (a file), or not (a --set value)

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(problem=f"alias *{event.anchor}: aliases are not allowed; "
                                   f"write the value out", problem_mark=event.start_mark)
        event = self.peek_event()
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent,
                              yaml.ScalarEvent)) and event.tag:
            raise _Refused(problem=f"the tag {_written(event.tag)} is not allowed: a value is "
                                   f"plain data; write it without the tag",
                           problem_mark=event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(problem=f"nested deeper than {MAX_DEPTH} levels",
                               problem_mark=self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _written(tag: str) -> str:
    """A tag as it was written: `!!binary`, not `tag:yaml.org,2002:binary`."""
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix):] if tag.startswith(prefix) else tag


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (INT_TAG, FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(INT_TAG, INT_12, list("-+0123456789"))
_Loader.add_implicit_resolver(FLOAT_TAG, FLOAT_12, list("-+.0123456789"))
_Loader.add_constructor(INT_TAG, _int_12)


def load_with_lines(path: Path) -> Tuple[Any, Dict[KeyPath, int]]:
    """The document as plain Python objects, and the 1-based line of every mapping key.
    YamlError names the file and line of what is wrong."""
    path = Path(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise YamlError(f"{path}:{line}: not a YAML text file: expected UTF-8, got the byte "
                        f"{data[e.start]:#04x}") from None
    value, lines = _document(text, str(path))
    return ({} if value is None else copy.deepcopy(value)), dict(lines)


def load_value(text: str, label: str) -> Any:
    """One YAML value (a --set VALUE) under the workload's rules; YamlError naming label."""
    return copy.deepcopy(_value(text, label))


# Parsed once per text: a sweep resolves hundreds of points from one base file and a few
# dozen --set values, and the pure-Python loader takes milliseconds a document. Callers
# get copies, as the values are mutable.
@lru_cache(maxsize=256)
def _document(text: str, label: str) -> Tuple[Any, Dict[KeyPath, int]]:
    lines: Dict[KeyPath, int] = {}
    return _load(text, label, lines), lines


@lru_cache(maxsize=4096)
def _value(text: str, label: str) -> Any:
    return _load(text, label, {}, at_line=False, invalid="the value is not valid YAML")


def _load(text: str, label: str, lines: Dict[KeyPath, int], at_line: bool = True,
          invalid: str = "not valid YAML"):
    loader = None
    try:
        loader = _Loader(text)  # the reader refuses control characters here
        loader.at_line = at_line
        node = loader.get_single_node()
        return None if node is None else _convert(loader, node, (), lines)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{label}:{mark.line + 1}" if mark and at_line else label
        problem = ", ".join(p for p in (e.context, e.problem) if p)
        if not isinstance(e, _Refused):
            problem = f"{invalid}: {problem}"
        raise YamlError(f"{where}: {problem}") from None
    except yaml.reader.ReaderError as e:
        line = text[:e.position].count("\n") + 1
        where = f"{label}:{line}" if at_line else label
        char = chr(e.character) if isinstance(e.character, int) else e.character
        raise YamlError(f"{where}: {invalid}: the character {char!r} (U+{ord(char):04X}) is "
                        f"not allowed in YAML") from None
    finally:
        if loader is not None:
            loader.dispose()


def _convert(loader, node, path: KeyPath, lines: Dict[KeyPath, int]):
    if isinstance(node, yaml.ScalarNode):
        if node.tag == "tag:yaml.org,2002:merge":
            raise _Refused(problem="merge keys (<<) are not allowed; write the keys "
                                   "out", problem_mark=node.start_mark)
        return loader.construct_object(node)
    if isinstance(node, yaml.SequenceNode):
        return [_convert(loader, v, path + (str(i),), lines) for i, v in enumerate(node.value)]
    out = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise _Refused(problem="a key must be a plain name, not a mapping or a list",
                           problem_mark=key_node.start_mark)
        key = str(_convert(loader, key_node, path, lines))
        line = key_node.start_mark.line + 1
        if key in out:
            where = f" (first at line {lines[path + (key,)]}, again at line {line})" \
                if loader.at_line else ""
            raise _Refused(problem=f"{'.'.join(path + (key,))}: duplicate key{where}; YAML "
                                   f"would keep only the last", problem_mark=key_node.start_mark)
        lines[path + (key,)] = line
        out[key] = _convert(loader, value_node, path + (key,), lines)
    return out
