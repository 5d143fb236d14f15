"""`--set KEY.PATH=VALUE`, the one override syntax of every command: the value is read as
YAML, so 8, true, null (None), [1, 2], {a: 1} and H200 mean what they would in a workload
file; a value YAML would read as something other than one value written out in full is the
text as written, and a value YAML reads as a number, true, null, quoted text or a flow
collection followed by a comment is refused (docs/workloads.md, "--set")."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Tuple


def parse_set(item: str) -> Tuple[Tuple[str, ...], Any]:
    """`a.b=value` -> (("a", "b"), value); ValueError naming the item otherwise."""
    from fileio.yaml_lines import YamlError, load_value

    key, sep, raw = item.partition("=")
    parts = tuple(key.split("."))
    if not sep or not all(parts):
        raise ValueError(f"--set {item!r}: expected KEY.PATH=VALUE")
    try:
        value = load_value(raw, f"--set {item!r}")
    except YamlError as e:
        raise ValueError(str(e)) from None
    return parts, raw.strip() if _read_otherwise(item, raw) else value


@lru_cache(maxsize=4096)  # a sweep's points share their --set values: composed once each
def _read_otherwise(item: str, raw: str) -> bool:
    """Whether YAML reads `raw` as other than one value written out in full: as a plain
    text and a comment (`D/my results #1` is `D/my results`), as a block mapping or list
    (`mtp: on` is {mtp: true}, `- x` is [x]), a plain text folded (a line break read as a
    space), or as nothing (`# x`, `---`). Quoted text, numbers, true / null, flow
    collections ([1, 2], {a: 1}) and block scalars are read as YAML (load_value has refused
    every tag); one of them followed by a comment (`8 # tuned`) is not what anyone types as
    text: ValueError naming the --set."""
    import yaml

    text = raw.strip()
    node = yaml.compose(raw, Loader=yaml.SafeLoader)  # load_value took it: no alias, shallow
    if node is None:
        return bool(text)
    if isinstance(node, yaml.CollectionNode) and not node.flow_style:
        return True
    comment = raw[node.end_mark.index:].strip()
    plain = isinstance(node, yaml.ScalarNode) and node.style is None
    if comment and not (plain and node.tag == "tag:yaml.org,2002:str"):
        read = raw[node.start_mark.index:node.end_mark.index]
        key = item.partition("=")[0]
        raise ValueError(f"--set {item!r}: YAML reads {read!r} and a comment ({comment!r}); "
                         f"--set takes no comment: drop it, or quote the whole text "
                         f"({key}={json.dumps(text)})")
    return bool(comment) or plain and "\n" in raw[node.start_mark.index:node.end_mark.index]
