"""A sweep's table read as data for its page (docs/report.md, "The sweep page"): the points
grouped (`--front-by`), each measure's Pareto front per group against tokens/s per user,
the best point per group meeting each interactivity level, and each group's best over the
first group's at that level, as InferenceX reads its fronts. The column contract is
docs/tables.md's `sweep` table."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

import pandas as pd

from ...errors import BadInput
from ...schema.capacity_outcomes import NOT_A_CAPACITY
from .. import sweep_state
from ..pareto import front
from ..runs import read_sweep_table

USER = "tokens_per_s_per_user"
# measure column -> (short name, axis label); per kW and per $/h where the table has them
MEASURES = {
    "output_tokens_per_device": ("per device", "output tok/s per device"),
    "output_tokens_per_kw": ("per kW", "output tok/s per kW"),
    "output_tokens_per_dollar_hour": ("per $/h", "output tok/s per $/h (device-hour)"),
}
# Why a group's points that meet a level have no value of a measure, where none has
WITHOUT = {
    "output_tokens_per_device": "no output tokens per device",
    "output_tokens_per_kw": "no power figure: no TDP (tdp_w, idle_w) is published in the "
                            "profile of {device}, and its runs measured no power",
    "output_tokens_per_dollar_hour": "no price: the sweep file's prices name none for "
                                     "{device}",
}
LEVELS = (20.0, 50.0, 100.0)  # tok/s per user, the default interactivity levels
NEEDED = ("point", "axes", "device", "front", "status", "reason", "folder", USER,
          "output_tokens_per_device")


@dataclass(frozen=True)
class Best:
    group: str
    level: float
    point: str  # "" where no point of the group meets the level
    label: str  # the point's configuration; where none, why not
    value: float  # the measure's value; NaN where none meets the level
    per_user: float
    ratio: float  # value over the first group's at the level (NaN where either has none)


@dataclass
class Sweep:
    path: Path  # the sweep's folder
    rows: pd.DataFrame  # the table, `group`, `label` and `state` (sweep_state) added
    front_by: str
    groups: List[str]  # in the order they first appear in the table
    measures: List[str]  # the MEASURES some point with an answer has a finite value of
    levels: Sequence[float]

    @property
    def answered(self) -> pd.Series:
        """Per row: the point has an answer (sweep_state), what the fronts, the figures
        and the best per level are drawn from."""
        return self.rows["state"] == sweep_state.ANSWER

    def fronts(self, measure: str) -> pd.Series:
        """Per row: on its group's Pareto front of `measure` and tokens/s per user."""
        pairs = list(zip(self.rows[measure].astype(float), self.rows[USER].astype(float)))
        return pd.Series(front(list(self.rows["group"]), pairs, list(self.answered)),
                         index=self.rows.index)

    def best(self, measure: str) -> List[Best]:
        """Per level, per group: the point with an answer with the highest `measure` among
        those at or above the level's tokens/s per user, and its ratio to the first
        group's."""
        out = []
        for level in self.levels:
            picked = {g: _best_of(self.rows, g, measure, level) for g in self.groups}
            first = picked[self.groups[0]]["value"] if self.groups else math.nan
            for group in self.groups:
                b = picked[group]
                ratio = b["value"] / first if first > 0 else math.nan
                out.append(Best(group, level, ratio=ratio, **b))
        return out

    @property
    def not_done(self) -> pd.DataFrame:
        """The points without an answer: found none, failed, not run or refused."""
        return self.rows[~self.answered]

    @property
    def counts(self) -> dict:
        return sweep_state.counts(self.rows.to_dict("records"))


def _best_of(rows: pd.DataFrame, group: str, measure: str, level: float) -> dict:
    value, per_user = rows[measure].astype(float), rows[USER].astype(float)
    fast = rows[(rows["group"] == group) & (rows["state"] == sweep_state.ANSWER)
                & (per_user >= level)]
    meets = fast[value[fast.index].notna()]
    if not len(meets):
        why = WITHOUT[measure].format(device=", ".join(dict.fromkeys(map(str, fast["device"])))) \
            if len(fast) else "no point meets the level"
        return dict(point="", label=why, value=math.nan, per_user=math.nan)
    at = meets[measure].astype(float).idxmax()  # the first of equals, in the table's order
    return dict(point=str(rows.at[at, "point"]), label=str(rows.at[at, "label"]),
                value=float(rows.at[at, measure]), per_user=float(rows.at[at, USER]))


def read_sweep(folder: Path, front_by: Optional[str] = None,
               levels: Sequence[float] = LEVELS) -> Sweep:
    """The sweep table in `folder` (sweep.parquet), grouped by `front_by`: None, the table's
    own `front` (the sweep's --front-by); `device`; or one of its axes. BadInput naming the
    file for a table that is not a sweep's or breaks its declaration (read_sweep_table),
    or a `front_by` that is neither."""
    path = Path(folder) / "sweep.parquet"
    rows = read_sweep_table(path, NEEDED).reset_index(drop=True)
    axes = [_axes(path, i, text) for i, text in enumerate(rows["axes"])]
    rows["group"] = _groups(path, rows, axes, front_by)
    named_by = front_by or ("device" if (rows["front"] == rows["device"]).all() else "")
    rows["label"] = [label(a, named_by) for a in axes]
    for measure in MEASURES:  # a table from before the cost columns: NaN, not drawn
        if measure not in rows.columns:
            rows[measure] = math.nan
    rows["state"] = [sweep_state.of(r) for r in rows.to_dict("records")]
    answered = rows["state"] == sweep_state.ANSWER
    measures = [m for m in MEASURES if rows.loc[answered, m].astype(float).notna().any()]
    groups = list(dict.fromkeys(rows.loc[rows["status"] != "refused", "group"]))
    return Sweep(Path(folder), rows, named_by or "the sweep's --front-by", groups,
                 measures or ["output_tokens_per_device"], tuple(levels))


def why(row) -> str:
    """Why a point has no answer: its reason, or the words of its search's outcome."""
    if row["state"] == sweep_state.NO_ANSWER:
        return NOT_A_CAPACITY[row["outcome"]]
    return str(row["reason"] or "")


def _groups(path: Path, rows: pd.DataFrame, axes: List[dict], front_by: Optional[str]):
    if front_by is None:
        return [str(v) for v in rows["front"]]
    if front_by == "device":
        return [str(v) for v in rows["device"]]
    if not any(front_by in a for a in axes):
        known = sorted({k for a in axes for k in a})
        raise BadInput(f"--front-by {front_by}: not an axis of the sweep {path.parent} "
                       f"(its axes: {', '.join(known) or 'none'}; or device)")
    return [str(a.get(front_by, "")) for a in axes]


def _axes(path: Path, row: int, text) -> dict:
    try:
        axes = json.loads(str(text))
    except ValueError:
        axes = None
    if not isinstance(axes, dict):
        raise BadInput(f"{path}: axes, row {row + 1}: expected a JSON object of axis values, "
                       f"got {str(text)[:80]!r}")
    return axes


def label(axes: dict, group_key: str) -> str:
    """A point's configuration: its axis values, less the key its group is named by; a
    deployment section as its shape (`8 DP8 EP8`, `1P1D 8+8`), not its every key."""
    parts = [_deployment(v) if k == "deployment" and isinstance(v, dict)
             else f"{k.rsplit('.', 1)[-1]}={v}" for k, v in axes.items() if k != group_key]
    return " ".join(parts) or "(the base)"


def _deployment(section: dict) -> str:
    """`1P1D 8+8 kv=scaleout` for P/D pools (instances, then each instance's devices);
    `8 devices` co-located; DP and EP named where they are not every device."""
    if "prefill" in section and "decode" in section:
        p, d = section["prefill"] or {}, section["decode"] or {}
        link = (section.get("kv_transfer") or {}).get("link")
        return (f"{p.get('instances', 1)}P{d.get('instances', 1)}D "
                f"{_shape(p)}+{_shape(d)}" + (f" kv={link}" if link else ""))
    return _shape(section, " devices")


def _shape(section: dict, unit: str = "") -> str:
    devices = section.get("devices", 1)
    dp = (section.get("attention") or {}).get("dp") or devices
    ep = (section.get("moe") or {}).get("ep") or devices
    extra = section.get("redundant_experts")
    return "".join([f"{devices}{unit}"] + ([f" DP{dp}"] if dp != devices else [])
                   + ([f" EP{ep}"] if ep != devices else [])
                   + ([f" (+{extra} experts)"] if extra else []))


def levels_from(text: str) -> List[float]:
    """`--interactivity 20,50,100`: tokens/s per user, each > 0; BadInput otherwise."""
    out = []
    for part in text.split(","):
        try:
            level = float(part)
        except ValueError:
            level = math.nan
        if not (math.isfinite(level) and level > 0):
            raise BadInput(f"--interactivity {text}: expected tokens/s per user, numbers > 0 "
                           f"separated by commas (20,50,100), got {part.strip()!r}")
        out.append(level)
    return sorted(set(out))

