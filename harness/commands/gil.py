"""steptrace gil W.yaml: the GIL A/B protocol of a workload: `steptrace run` with `gil:
both`, the arms interleaved in shuffled blocks (docs/gil.md). Its --set values come after
that one, so `--set gil_aa=true` adds the A/A arm."""

from __future__ import annotations

from . import run
from .common import add_json, add_set


def add(p) -> None:
    p.add_argument("workload")
    add_set(p, "gil_aa=true")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    args.set = ["gil=both", *args.set]
    return run.main(args)
