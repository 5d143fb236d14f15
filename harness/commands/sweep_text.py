"""A sweep's table as `steptrace sweep` and `steptrace show SWEEP_FOLDER` say it: its counts
and rows (--json), and the text, a line a point."""

from __future__ import annotations

import json

from ..analysis import sweep_state
from ..schema.capacity_outcomes import LOWER_BOUND, NOT_A_CAPACITY

_SAID = {**NOT_A_CAPACITY, **LOWER_BOUND}  # the outcomes shown in place of done


def points(df) -> dict:
    """The sweep table's counts and rows, as `--json` and the text say them."""
    records = df.astype(object).where(df.notna(), None).to_dict("records")
    return dict(**_counts(df, records), rows=_rows(records))


def _counts(df, records: list) -> dict:
    """The table's counts by status (a point failed or not run is `failed`), and by state
    (harness/analysis/sweep_state.py) of its rows as `records`: `answered`, `lower_bounds`,
    `no_answer` by outcome, `not_run`."""
    status = df["status"]
    by_state = sweep_state.counts(records)
    return dict(points=len(df), done=int((status == "done").sum()),
                skipped=int(df["skipped"].sum()), failed=int((status == "failed").sum()),
                refused=int((status == "refused").sum()),
                **{k: by_state[k] for k in ("answered", "lower_bounds", "no_answer",
                                            "not_run")})


def _rows(records: list) -> list:
    return [dict(r, axes=json.loads(r["axes"]), concurrency=None if r["concurrency"] is None
                 or r["concurrency"] != r["concurrency"] else int(r["concurrency"]),
                 state=sweep_state.of(r))
            for r in records]


def axes_line(axes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in axes.items())


def print_text(r: dict) -> None:
    """The table, a line a point (and one saying why, for a point failed, refused or
    without an answer, or with a lower bound of one), then the counts by state."""
    print(f"steptrace sweep: {r['name']} ({r['mode']} mode): Pareto fronts by "
          f"{r['front_by']}")
    wide = max([len("status")] + [len(_shown(row)) for row in r["rows"]])
    print(f"{'point':<12} {'status':<{wide}} {'out tok/s/device':>17} {'tok/s/user':>11} "
          f"{'ttft p99 s':>11} {'tpot p50 s':>11} {'pareto':>6}  axes")
    for row in r["rows"]:
        answered = sweep_state.of(row) == sweep_state.ANSWER  # the others' figures: none
        figures = "".join(f" {_figure(row[k] if answered else None, w)}" for k, w in (
            ("output_tokens_per_device", 17), ("tokens_per_s_per_user", 11),
            ("ttft_p99_s", 11), ("tpot_p50_s", 11)))
        print(f"{row['point'] or '-':<12} {_shown(row):<{wide}}{figures} "
              f"{'*' if row['pareto'] else '':>6}  {axes_line(row['axes'])}")
        reason = row["reason"] or _SAID.get(_shown(row))
        if reason and reason != _shown(row):
            print(f"{'':<12} {reason}")
    print(f"  table: {r['table']}")
    skipped = f"; {r['skipped']} skipped (complete before)" if r["skipped"] else ""
    print(f"{sweep_state.said(sweep_state.counts(r['rows']))}{skipped}")


def _shown(row: dict) -> str:
    """The point's state as its status column reads it: `done`, or a capacity search's
    outcome where it is no answer or a lower bound of one; `failed`, `not run`,
    `refused`."""
    state = sweep_state.of(row)
    if state in (sweep_state.ANSWER, sweep_state.NO_ANSWER) and row.get("outcome") in _SAID:
        return row["outcome"]
    return "done" if state == sweep_state.ANSWER else state


def _figure(v, width: int) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width},.4g}"
