"""steptrace capacity W.yaml: the highest arrival rate at which the workload's SLO attainment
stays at or above a target, on a modeled device (docs/capacity.md).

Exit 0 with the capacity (or a lower bound, when every rate up to the highest met the
SLO); 1 when even the lowest rate probed misses it, or when the search ran out of probes
before its bracket reached the resolution; 2 bad input; 130 / 143 when a signal stopped
the search (the probes run so far are written, no capacity table).
"""

from __future__ import annotations

import sys

from ..errors import BadInput, RunFailed
from .common import add_json, add_set, print_json
from .validate import load


def add(p) -> None:
    p.add_argument("workload")
    add_set(p, "deployment.moe.ep=16")
    p.add_argument("--attainment", type=float, default=None, metavar="SHARE",
                   help="the share of requests that must meet every SLO (default 0.9)")
    p.add_argument("--resolution", type=float, default=None, metavar="R",
                   help="stop when the bracket's high / low <= 1 + R (default 0.05)")
    p.add_argument("--lowest", type=float, default=None, metavar="RATE",
                   help="the lowest rate to probe, req/s (default the workload's / 1024)")
    p.add_argument("--highest", type=float, default=None, metavar="RATE",
                   help="the highest rate to probe, req/s (default the workload's x 1024)")
    p.add_argument("--max-probes", type=int, default=None, metavar="N",
                   help="stop after N probes, unresolved if the bracket is still wider "
                        "than the resolution (default 40)")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    from ..io.atomic import WriteFailed
    from ..io.interrupt import Stop, signals_stop
    from ..sweeps.capacity import (
        DEFAULT_ATTAINMENT,
        DEFAULT_RESOLUTION,
        CapacityError,
        Stopped,
        find,
    )
    from ..sweeps.capacity_search import MAX_PROBES

    workload = load(args)
    limits = {k for k, v in workload.values["slo"].items() if v is not None}
    if limits == {"tpot"}:
        print(f"steptrace: note: {args.workload}: slo: TPOT alone does not bound queueing: "
              f"an overloaded deployment queues requests and may still meet it at any rate; "
              f"add slo.ttft or slo.e2e", file=sys.stderr)
    target = DEFAULT_ATTAINMENT if args.attainment is None else args.attainment
    resolution = DEFAULT_RESOLUTION if args.resolution is None else args.resolution
    max_probes = MAX_PROBES if args.max_probes is None else args.max_probes
    stop = Stop()
    with signals_stop(stop):
        try:
            capacity = find(workload, tuple(args.set), target, resolution, args.lowest,
                            args.highest, max_probes, stop, _progress)
        except CapacityError as e:
            raise BadInput(e) from None
        except Stopped as e:
            print(f"steptrace: interrupted by {stop.signal_name}: {e}", file=sys.stderr)
            return stop.exit_code
        except WriteFailed as e:  # an output could not be written (harness/io/atomic.py)
            raise RunFailed(e) from e
        except Exception as e:  # a probe's run failed: report it, with what is on disk
            raise RunFailed(f"{type(e).__name__}: {e}") from e
    result = _result(capacity, workload)
    if args.json:
        print_json(result)
    else:
        _print_text(result)
    return 1 if result["outcome"] in ("none", "probe_limit") else 0


def _progress(row: dict) -> None:
    print(f"  probe {row['probe']}: {row['rate']:.4g} req/s: attainment "
          f"{_percent(row['attainment'])}: {'met' if row['met'] else 'missed'}", file=sys.stderr)


def _result(capacity, workload) -> dict:
    found = capacity.search
    at = capacity.at_capacity
    outcome = "probe_limit" if found.out_of_probes else "capacity" if found.found \
        else "at_least" if found.low is not None else "none"
    fmt = workload.values["table_format"]
    return dict(
        workload=str(workload.path), name=workload.name, device=capacity.profile, modeled=True,
        clock="virtual", slo=capacity.slo, attainment_target=capacity.target,
        resolution=capacity.resolution, max_probes=capacity.max_probes,
        rate_key=capacity.knob.key,
        workload_rate=capacity.knob.rate, outcome=outcome,
        capacity=None if at is None else dict(
            rate=found.low, missed_at=found.high, attainment=at["attainment"],
            goodput=at["goodput"], output_tokens_per_device=at["output_tokens_per_device"],
            tpot_p50_s=at["tpot_p50_s"], tpot_p99_s=at["tpot_p99_s"],
            run_dir=str(capacity.folder / at["run_id"])),
        folder=str(capacity.folder), table=str(capacity.folder / f"capacity.{fmt}"),
        probes=capacity.table().to_dict("records"))


def _print_text(r: dict) -> None:
    slo = ", ".join(f"{name} <= {limit:g} s" for name, limit in r["slo"].items())
    print(f"steptrace capacity: {r['name']} on {r['device']} (modeled, virtual clock); SLO "
          f"{slo}; target: {_percent(r['attainment_target'])} of requests meet it")
    print(f"{'probe':>5} {'rate req/s':>11} {'met':>4} {'attainment':>11} {'goodput req/s':>14} "
          f"{'out tok/s/device':>17} {'ttft p99 s':>11} {'tpot p50 s':>11} {'tpot p99 s':>11}")
    for p in sorted(r["probes"], key=lambda p: p["rate"]):
        print(f"{p['probe']:>5} {p['rate']:>11.4g} {'yes' if p['met'] else 'no':>4} "
              f"{_percent(p['attainment']):>11} {p['goodput']:>14.4g} "
              f"{p['output_tokens_per_device']:>17,.1f} {p['ttft_p99_s']:>11.4g} "
              f"{p['tpot_p50_s']:>11.4g} {p['tpot_p99_s']:>11.4g}")
    c, lowest = r["capacity"], min(p["rate"] for p in r["probes"])
    if r["outcome"] == "probe_limit":
        _print_unresolved(r)
    elif r["outcome"] == "none":
        print(f"no capacity: even the lowest rate probed, {lowest:.4g} req/s, misses the target "
              f"(--lowest probes lower; or the SLO cannot be met on this deployment)")
    elif r["outcome"] == "at_least":
        print(f"capacity: at least {c['rate']:.4g} req/s, {c['output_tokens_per_device']:,.1f} "
              f"output tok/s per device: every rate probed met the target, up to the highest "
              f"(--highest probes higher)")
    else:
        print(f"capacity: {c['rate']:.4g} req/s, {c['output_tokens_per_device']:,.1f} output "
              f"tok/s per device (attainment {_percent(c['attainment'])}, goodput "
              f"{c['goodput']:.4g} req/s)")
        print(f"  resolution: it met the target at {c['rate']:.4g} req/s and missed it at "
              f"{c['missed_at']:.4g} req/s (+{c['missed_at'] / c['rate'] - 1:.1%}); modeled on "
              f"the {r['device']} profile")
    if c is not None:
        at = "the highest rate that met" if r["outcome"] == "probe_limit" else "capacity"
        print(f"  run at {at}: {c['run_dir']}")
    print(f"  probes and table: {r['table']}")


def _print_unresolved(r: dict) -> None:
    met = [p["rate"] for p in r["probes"] if p["met"]]
    missed = [p["rate"] for p in r["probes"] if not p["met"]]
    if met and missed:
        low, high = max(met), min(missed)
        got = (f"the target met at {low:.4g} req/s and missed at {high:.4g} req/s "
               f"(+{high / low - 1:.1%}), wider than the resolution {r['resolution']:g}")
    elif met:
        got = f"every rate probed meeting the target, up to {max(met):.4g} req/s"
    else:
        got = f"every rate probed missing the target, down to {min(missed):.4g} req/s"
    print(f"no capacity: the search ran out of its {r['max_probes']} probes (--max-probes) "
          f"with {got}")


def _percent(share: float) -> str:
    return "–" if share != share else f"{share:.1%}"
