"""steptrace validate W.yaml: check a workload whole without running it (no torch)."""

from __future__ import annotations

import sys

from ..errors import BadInput
from ..workload import WorkloadError, load_workload
from .common import add_json, add_set, print_json


def add(p) -> None:
    p.add_argument("workload")
    add_set(p, "engine.num_mtp=1")
    add_json(p)
    p.set_defaults(handler=main)


def load(args):
    """The workload with its --set overrides; BadInput naming file, line and key. What is
    valid but likely not meant is said on stderr (`run` says it too, before running)."""
    try:
        workload = load_workload(args.workload, tuple(args.set))
    except WorkloadError as e:
        raise BadInput(e) from None
    for note in workload.notes:
        print(f"steptrace: note: {args.workload}: {note}", file=sys.stderr)
    return workload


def main(args) -> int:
    workload = load(args)
    if args.json:
        print_json(dict(workload=args.workload, valid=True, name=workload.name,
                        clock=workload.clock, device=workload.device, gil=workload.gil,
                        values=workload.values, notes=list(workload.notes)))
    else:
        print(f"{args.workload}: valid ({workload.name}: {workload.clock} clock, "
              f"device {workload.device}, gil {workload.gil})")
    return 0
