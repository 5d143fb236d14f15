"""`search: {method: frontier, ...}`: the frontier search's keys, read and checked with the
sweep file (docs/frontier.md, "The sweep file"), and the workload keys the search sets,
which no axis may (SET_BY_SEARCH)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Dict, Optional, Tuple

LEVELS = (25.0, 50.0, 75.0, 100.0, 125.0, 150.0)  # tok/s per user: InferenceX's readings

# The workload keys each deployment and rung sets: no axis may
SET_BY_SEARCH = ("deployment.devices", "deployment.attention", "deployment.moe",
                 "deployment.dense", "deployment.redundant_experts", "deployment.prefill",
                 "deployment.decode", "deployment.kv_transfer", "engine.num_mtp",
                 "engine.mixed_batches", "engine.overlap", "load", "trace.generate.requests")


@dataclass(frozen=True)
class FrontierOptions:
    levels: Tuple[float, ...] = LEVELS
    reference: Optional[str] = None  # the device the others are read against; None: the first
    mtp: Tuple[int, ...] = (0, 1, 3)  # draft tokens tried
    most: int = 72  # the most devices of one instance
    keep: int = 32  # deployments run per device after pruning
    margin: float = 0.25  # kept where its estimate comes this close to the device's best
    rounds: int = 4  # requests per rung: this many times its concurrency
    requests: int = 20_000  # requests per rung, at most
    colocated: bool = True
    disaggregated: bool = True


KEYS = tuple(f.name for f in fields(FrontierOptions))


def read(search: Dict[str, Any], fail: Callable[[Tuple[str, ...], str], Any]) -> FrontierOptions:
    """The search mapping's frontier keys, each checked; `fail(key, message)` raises."""
    def key(name):
        return ("search", name)

    values = {**asdict(FrontierOptions()), **{k: v for k, v in search.items()
                                              if k != "method"}}
    levels = values["levels"]
    if not (isinstance(levels, (list, tuple)) and levels and all(_positive(x) for x in levels)):
        fail(key("levels"), f"expected a non-empty list of tok/s per user, numbers > 0, got "
                            f"{levels!r}")
    if len(set(levels)) != len(levels):
        fail(key("levels"), f"each level once, got {list(levels)!r}")
    reference = values["reference"]
    if reference is not None and not isinstance(reference, str):
        fail(key("reference"), f"expected a device as the points name it (modeled:B200), "
                               f"got {reference!r}")
    mtp = values["mtp"]
    if not (isinstance(mtp, (list, tuple)) and mtp and all(_whole(x, 0) for x in mtp)
            and len(set(mtp)) == len(mtp)):
        fail(key("mtp"), f"expected a list of draft-token counts, integers >= 0 each once, "
                         f"got {mtp!r}")
    for name, low in (("most", 1), ("keep", 1), ("rounds", 2), ("requests", 1)):
        if not _whole(values[name], low):
            fail(key(name), f"expected an integer >= {low}, got {values[name]!r}")
    margin = values["margin"]
    if not (_number(margin) and 0 <= margin < 1):
        fail(key("margin"), f"expected a number in [0, 1), got {margin!r}")
    for name in ("colocated", "disaggregated"):
        if not isinstance(values[name], bool):
            fail(key(name), f"expected true or false, got {values[name]!r}")
    if not (values["colocated"] or values["disaggregated"]):
        fail(key("colocated"), "both colocated and disaggregated are false: no deployment "
                               "to search")
    return FrontierOptions(tuple(float(x) for x in sorted(levels)), reference, tuple(mtp),
                           values["most"], values["keep"], float(margin), values["rounds"],
                           values["requests"], values["colocated"], values["disaggregated"])


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _positive(x) -> bool:
    return _number(x) and x > 0


def _whole(x, low: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low
