"""A run's capacity search, where the run is one of its probes: the search's `capacity`
table (harness/sweeps/capacity.py, in the search's folder beside the probes' run folders),
read as the report's other tables are (harness/record/table_reader.py), and the run's place
in it.

The table does not hold the search's attainment target: a probe met it where its attainment
is at or above it, so the target lies above every missed probe's attainment and at or
below every met one's. The default (0.9) is taken where the table agrees with it; otherwise
the lowest met attainment, said to be an upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from ...record.table_reader import read_table, table_file
from ...schema.values import DEFAULT_ATTAINMENT

COLUMNS = ["run_id", "rate", "met", "at_capacity", "length_check", "attainment"]


@dataclass
class Search:
    folder: str          # the search's folder, as the run's parent
    rate: np.ndarray     # per probe, the offered rate (req/s), in the order they ran
    attainment: np.ndarray
    met: np.ndarray      # bool
    length_check: np.ndarray  # bool
    this: np.ndarray     # bool: the probe that is the run
    at_capacity: bool    # the run is the search's probe at capacity
    capacity: float      # the rate at capacity (NaN: no probe met the target)
    missed_at: float     # the lowest rate above it that missed (NaN: none did)
    target: float
    target_exact: bool   # False: `target` is an upper bound read off the met probes


def search(run) -> Optional[Search]:
    """The search the run is a probe of, or None when its folder's parent holds no
    capacity table naming it."""
    folder = run.dir.parent
    path = table_file(folder, "capacity")
    if path is None or not path.is_file():
        return None
    table = read_table(path, "capacity", COLUMNS)
    ids = table["run_id"].astype(str).to_numpy()
    this = ids == run.dir.name
    if not this.any():
        return None
    rate = table["rate"].to_numpy(np.float64)
    attainment = table["attainment"].to_numpy(np.float64)
    met = table["met"].to_numpy(bool)
    check = table["length_check"].to_numpy(bool)
    at = table["at_capacity"].to_numpy(bool)
    found = rate[at & ~check]
    capacity = float(found[0]) if len(found) else math.nan
    above = rate[~met & ~check & (rate > capacity)] if len(found) else rate[~met & ~check]
    target, exact = _target(attainment, met)
    return Search(str(folder), rate, attainment, met, check, this, bool((this & at).any()),
                  capacity, float(above.min()) if len(above) else math.nan, target, exact)


def _target(attainment: np.ndarray, met: np.ndarray):
    finite = np.isfinite(attainment)
    missed = attainment[~met & finite]
    kept = attainment[met & finite]
    low = float(missed.max()) if len(missed) else -math.inf
    high = float(kept.min()) if len(kept) else math.inf
    if low < DEFAULT_ATTAINMENT <= high:
        return DEFAULT_ATTAINMENT, True
    return (high, False) if math.isfinite(high) else (DEFAULT_ATTAINMENT, False)


def searches(arms) -> List[Optional[Search]]:
    """Per arm, its first run's search (None where it is not a probe of one)."""
    return [search(arm.runs[0]) for arm in arms]
