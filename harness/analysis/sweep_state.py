"""A sweep point's state, read from its row of the `sweep` table (docs/sweeps.md, "A
point's state"): an answer (a capacity, a lower bound of one, or a run's figures), no answer
(it ran, and its capacity search's outcome names no capacity), failed, not run, or
refused. Every view of a sweep reads it here (the text table and its closing line, the
--json counts, the Pareto front, the sweep page, summary.md and the fronts figures), so
that none takes a point without an answer for one that has it."""

from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional

from ..schema.capacity_outcomes import LOWER_BOUND, NOT_A_CAPACITY

ANSWER = "answer"
NO_ANSWER = "no answer"
FAILED = "failed"
NOT_RUN = "not run"  # also the reason in the row of a point the sweep never ran
REFUSED = "refused"


def state(status: str, outcome: Optional[str], reason: Optional[str]) -> str:
    """The state of a row of the table's `status`, `outcome` and `reason`."""
    if status == "done":
        return NO_ANSWER if outcome in NOT_A_CAPACITY else ANSWER
    if status == "failed" and reason == NOT_RUN:
        return NOT_RUN
    return status


def of(row: Mapping) -> str:
    """The state of a row as a mapping of the table's columns (`outcome` may be absent, as
    in a table written before it)."""
    return state(row["status"], row.get("outcome"), row.get("reason"))


def counts(rows: Iterable[Mapping]) -> Dict:
    """The points (`points`) in each state: `answered` (of which `lower_bounds`),
    `no_answer` per outcome, `failed`, `not_run` and `refused`."""
    out: Dict = dict(points=0, answered=0, lower_bounds=0, no_answer={}, failed=0,
                     not_run=0, refused=0)
    for row in rows:
        out["points"] += 1
        kind = of(row)
        if kind == ANSWER:
            out["answered"] += 1
            out["lower_bounds"] += row.get("outcome") in LOWER_BOUND
        elif kind == NO_ANSWER:
            outcome = row["outcome"]
            out["no_answer"][outcome] = out["no_answer"].get(outcome, 0) + 1
        else:
            out[kind.replace(" ", "_")] += 1
    return out


def said(c: Mapping) -> str:
    """`12 points: 10 with an answer (1 a lower bound), 2 found no answer (trace_too_short:
    2), 1 failed, 1 refused`: the states no point is in left out, but the answered."""
    bound = f" ({c['lower_bounds']} a lower bound)" if c["lower_bounds"] else ""
    parts = [f"{c['answered']} with an answer{bound}"]
    if c["no_answer"]:
        by = ", ".join(f"{o}: {n}" for o, n in sorted(c["no_answer"].items()))
        parts.append(f"{sum(c['no_answer'].values())} found no answer ({by})")
    parts += [f"{c[key]} {key.replace('_', ' ')}" for key in ("failed", "not_run", "refused")
              if c[key]]
    return f"{c['points']} point{'s' * (c['points'] != 1)}: {', '.join(parts)}"
