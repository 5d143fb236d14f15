"""`--set KEY.PATH=VALUE`, the one override syntax of every command: the value is read as
YAML, so 8, true, null (None), [1, 2], {a: 1} and H200 mean what they would in a workload
file; a value YAML would read as something other than one value written out in full is the
text as written (docs/workloads.md, "--set")."""

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
        value = load_value(raw, f"--set {item!r}")
    except YamlError as e:
        raise ValueError(str(e)) from None
    return parts, raw.strip() if _read_otherwise(raw) else value


def _read_otherwise(raw: str) -> bool:
    """Whether YAML reads `raw` as other than one value written out in full: with a
    comment dropped (`D/my results #1` is `D/my results`), as a block mapping or list
    (`mtp: on` is {mtp: true}, `- x` is [x]), a plain text folded (a line break read as a
    space), or as nothing (`# x`, `---`). Quoted text, numbers, true / null, flow
    collections ([1, 2], {a: 1}), tags and block scalars are read as YAML."""
    import yaml

    text = raw.strip()
    node = yaml.compose(raw, Loader=yaml.SafeLoader)  # load_value took it: no alias, shallow
    if node is None:
        return bool(text)
    if raw[node.end_mark.index:].strip():  # a comment after the value
        return True
    if isinstance(node, yaml.ScalarNode):  # a plain text over lines, folded
        return node.style is None and "\n" in raw[node.start_mark.index:node.end_mark.index]
    return not node.flow_style
