"""A frontier search's answer read as data for the sweep page (docs/report.md, "The frontier
search's answer"): its three tables (docs/frontier.md, "The tables"; their columns are
docs/tables.md's) read by file, and what timed each device's front points (their runs'
manifests). The page's code never imports the search's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import pandas as pd

from fileio.regular import not_regular

from ...errors import BadInput
from ...record.run_folder import read_manifest, untimed_parts
from ...record.table_reader import check_values, read_frame, table_columns
from ...schema.frontier_tables import FLAGGED, MEASURES, STATES, TABLE_NAMES

NEEDED = {
    "frontier_points": ("device", "deployment", "kind", "concurrency", "point", "status",
                        "tokens_per_s_per_user", "output_tokens_per_s_per_device",
                        "total_tokens_per_s_per_device", "eligible", "left_off",
                        "front_output", "front_total"),
    "frontier_deployments": ("device", "deployment", "state"),
    "frontier_readings": ("metric", "device", "level", "value", "low", "high", "left", "right",
                          "reason", "reference", "ratio", "ratio_low", "ratio_high",
                          "ratio_reason"),
}
# the fronts drawn: the readings' metric -> (its points' column, its front flag)
DRAWN = {m: (MEASURES[m], f"front_{m}") for m in FLAGGED}


@dataclass
class Frontier:
    points: pd.DataFrame  # a row a rung
    deployments: pd.DataFrame  # a row a deployment considered
    readings: pd.DataFrame  # a row a metric, level and device
    timed_by: Dict[str, List[str]]  # per device: what timed its front points' steps

    @property
    def devices(self) -> List[str]:
        """In the search's order: the points', then any only the other tables name."""
        return list(dict.fromkeys([*self.points["device"], *self.deployments["device"],
                                   *self.readings["device"]]))

    @property
    def levels(self) -> List[float]:
        return sorted(set(self.readings["level"].astype(float)))

    @property
    def modeled(self) -> bool:
        """Every front point's run modeled (none measured, none without a manifest)."""
        said = [t for ts in self.timed_by.values() for t in ts]
        return bool(said) and all(t.startswith("modeled") for t in said)

    def counts(self) -> List[dict]:
        """Per device: the deployments considered, and how many in each state."""
        out = []
        for device in self.devices:
            states = self.deployments.loc[self.deployments["device"] == device, "state"]
            out.append(dict(device=device, considered=len(states),
                            **{s: int((states == s).sum()) for s in STATES}))
        return out


def is_frontier(folder: Path) -> bool:
    """The folder holds a frontier search's answer: any of its tables."""
    return any((Path(folder) / f"{name}.parquet").exists() for name in TABLE_NAMES)


def read_frontier(folder: Path, sweep_rows: pd.DataFrame) -> Optional[Frontier]:
    """The frontier tables in `folder`, or None where it holds none of them. BadInput naming
    the file where one is missing beside the others, unreadable, lacks a needed column or
    holds a value of another kind than docs/tables.md declares; naming the row where a
    point's folder (the sweep table's `folder`) reaches outside the sweep's."""
    folder = Path(folder)
    if not is_frontier(folder):
        return None
    points, deployments, readings = (_read(folder / f"{name}.parquet", name) for name in TABLE_NAMES)
    return Frontier(points, deployments, readings, _timed_by(folder, points, sweep_rows))


def _read(path: Path, name: str) -> pd.DataFrame:
    why = not_regular(path)
    if why:
        raise BadInput(f"{path}: {why} (a frontier search writes {', '.join(TABLE_NAMES)} "
                       f"together)")
    present = table_columns(path)
    missing = [c for c in NEEDED[name] if c not in present]
    if missing:
        raise BadInput(f"{path}: no column(s) {', '.join(missing)}: not a {name} table "
                       f"(docs/tables.md, {name})")
    try:
        frame = read_frame(path, NEEDED[name])
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable ({e})") from None
    check_values(path, name, frame)
    text = [c for c in NEEDED[name] if frame[c].dtype == object]
    frame[text] = frame[text].fillna("").astype(str)
    return frame


def _timed_by(folder: Path, points: pd.DataFrame,
              sweep_rows: pd.DataFrame) -> Dict[str, List[str]]:
    """Per device, what timed its front points' steps, as their runs' manifests say, each
    once: `modeled by <the kernel tables or rooflines>`, `measured on <device>`, or `no run
    found` for a point whose folder holds none."""
    folders = dict(zip(sweep_rows["point"].astype(str), sweep_rows["folder"]))
    front = points[points["front_output"] | points["front_total"]]
    out: Dict[str, List[str]] = {}
    for device, point in zip(front["device"], front["point"]):
        said = out.setdefault(device, [])
        text = _run_timing(folder, folders.get(point), point)
        if text not in said:
            said.append(text)
    return out


def _run_timing(sweep: Path, folder, point: str) -> str:
    if not isinstance(folder, str) or not folder:
        return "no run found"
    if Path(folder).is_absolute() or ".." in Path(folder).parts:
        raise BadInput(f"{sweep / 'sweep.parquet'}: point {point}: folder {folder!r}: "
                       f"expected a point's folder relative to the sweep's (points/<point>)")
    manifests = sorted((sweep / folder).rglob("manifest.json"))
    if not manifests:
        return "no run found"
    manifest = read_manifest(manifests[0].parent)
    if not manifest.modeled:
        return f"measured on {(manifest.device or {})['name']}"
    pools = manifest.pools
    if isinstance(pools, dict):
        return "modeled by " + " and ".join(
            f"{_step_model(p.get('step_model'))} ({role} pool)"
            for role, p in pools.items() if isinstance(p, dict))
    return f"modeled by {_step_model(manifest.step_model)}"


def _step_model(m) -> str:
    """A manifest's `step_model` (docs/modeling.md) in a few words: the kernel tables and
    their source, or rooflines; the parts the tables lack, and what timed them."""
    if not isinstance(m, dict) or m.get("table") in (None, "roofline"):
        source = m.get("source") if isinstance(m, dict) else None
        return "rooflines" + (f" ({source})" if source else "")
    text = f"{m['table']} kernel tables ({str(m.get('source', '')).split(',')[0]})"
    missing = [str(part) for part in m.get("missing") or {}]
    for how, parts in untimed_parts(missing):
        text += f", {' and '.join(parts)} by {how}"
    return text
