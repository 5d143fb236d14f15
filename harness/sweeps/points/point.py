"""One point of a sweep: the base workload with the point's overrides, resolved (loaded and
validated as `run` and `validate` load it) and named by a hash of its resolved values, or
refused with the reason it cannot be valid."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from fileio.yaml_lines import YamlError, load_value

from ...workload import Workload, WorkloadError, load_workload
from ..capacity import CapacityError, check, knob
from ..gil_protocol import planned
from .where import Filter, WhereError

POINTS = "points"  # the sweep folder's subfolder of point folders
KEY_HEX = 12  # the point's key: this many hex digits of the hash
UNHASHED = ("output",)  # where a point is written is not what it is


@dataclass(frozen=True)
class Point:
    """What a point's process needs: a plain value (pickled to a worker, or a Ray task)."""

    axes: Dict[str, Any]  # axis key -> the point's value
    key: str  # KEY_HEX hex digits of the hash of its resolved values and the mode
    mode: str  # run or capacity
    workload: Path  # the base workload
    overrides: Tuple[str, ...]  # --set items: the base's, the axes' and output=<folder>
    folder: Path  # <sweep folder>/points/<key>
    device: str  # the resolved workload's
    front: str  # the resolved value of the --front-by key, as text


@dataclass(frozen=True)
class Refused:
    axes: Dict[str, Any]
    reason: str


def set_item(key: str, value: Any) -> str:
    """`key=value` as --set reads it back to `value`: plain text where YAML reads it as
    the same string, else the value in JSON (a subset of YAML)."""
    if isinstance(value, str):
        try:
            if load_value(value, key) == value:
                return f"{key}={value}"
        except YamlError:
            pass
    return f"{key}={json.dumps(value)}"


def point_key(values: Dict[str, Any], mode: str) -> str:
    """The hash naming a point's folder: sha256 of the canonical JSON of the mode and the
    resolved workload's values less UNHASHED (8 and 8.0 hash alike)."""
    kept = {k: v for k, v in values.items() if k not in UNHASHED}
    text = json.dumps(_canonical(dict(mode=mode, workload=kept)), sort_keys=True,
                      separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_HEX]


def _canonical(v):
    if isinstance(v, dict):
        return {str(k): _canonical(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_canonical(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def resolve(base: Path, mode: str, axes: Dict[str, Any], base_sets: Tuple[str, ...],
            folder: Path, front_by: str,
            where: Optional["LateWhere"] = None) -> Union[Point, Refused, None]:
    """The point `axes` of the sweep in `folder`: the base loaded with `base_sets` (less
    those of an axis's key, and output) and the axes' values; Refused where it is not a
    valid workload or `mode` cannot run it; None where `where` rejects it."""
    axis_keys = set(axes) | {"output"}
    kept = tuple(s for s in base_sets if s.partition("=")[0] not in axis_keys)
    items = kept + tuple(set_item(k, v) for k, v in axes.items())
    try:
        workload = load_workload(base, items)
    except WorkloadError as e:
        return None if where and not where.keeps(axes) else Refused(axes, str(e))
    if where is not None and not where.keeps(axes, workload.values):
        return None
    reason = refusal(workload, mode)
    if reason:
        return Refused(axes, reason)
    key = point_key(workload.values, mode)
    place = folder / POINTS / key
    return Point(axes, key, mode, base, items + (set_item("output", str(place)),), place,
                 workload.device, str(lookup(workload.values, front_by)))


def refusal(workload: Workload, mode: str) -> Optional[str]:
    """Why `mode` cannot run the valid workload as one point; None when it can."""
    if mode == "capacity":
        try:
            check(workload)
            knob(workload)  # a trace file's arrivals must span time: a rate to scale
        except CapacityError as e:
            return str(e)
        return None
    runs = len(planned(workload))
    if runs != 1:
        return (f"{workload.path}: gil, repeats: a point is one run, but the workload plans "
                f"{runs} (gil, gil_aa, gil_postprocess, repeats, gil_switch_interval_s)")
    return None


@dataclass(frozen=True)
class LateWhere:
    """A `where` that names workload keys besides the axes, judged on a point's resolved
    values; for a point that is no valid workload, on the base's (with the axes')."""

    where: Filter
    base: Dict[str, Any]  # the base workload's resolved values

    def keeps(self, axes: Dict[str, Any], values: Optional[Dict[str, Any]] = None) -> bool:
        values = self.base if values is None else values
        try:
            return self.where({name: axes[name] if name in axes else lookup(values, name)
                               for name in self.where.names})
        except KeyError as e:  # a key path into a section the point leaves out
            raise WhereError(f"at {axes}: {e.args[0]}") from None


def lookup(values: Dict[str, Any], key: str) -> Any:
    """The value at a dotted key path of a resolved workload; KeyError naming the part."""
    node: Any = values
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{key}: {part} is not a workload key")
        node = node[part]
    return node
