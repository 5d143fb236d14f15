"""steptrace capacity W.yaml: the highest arrival rate at which the workload's SLO attainment
stays at or above a target, on a modeled device (docs/capacity.md); under load.mode
concurrency, the highest number of requests in flight, with the request rate it achieves.

Exit 0 with the capacity (or a lower bound, when every rate up to the highest met the
SLO); 1 when even the lowest rate probed misses it, when the search ran out of probes
before its bracket reached the resolution, or when the answer depends on the trace's length
(the run at it reached no steady state, or the answer less its resolution misses the target
on a trace twice as long); 2 bad input;
130 / 143 when a signal stopped the search (the probes run so far are written, no capacity
table).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Optional

from ..errors import BadInput, RunFailed
from ..schema.capacity_outcomes import NOT_A_CAPACITY
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
                   help="the lowest rate to probe, req/s (default the workload's / 1024); "
                        "under load.mode concurrency, requests in flight (default 1)")
    p.add_argument("--highest", type=float, default=None, metavar="RATE",
                   help="the highest rate to probe, req/s (default the workload's x 1024); "
                        "under load.mode concurrency, requests in flight (default the "
                        "trace's requests, or the workload's concurrency if more)")
    p.add_argument("--max-probes", type=int, default=None, metavar="N",
                   help="stop after N probes, unresolved if the bracket is still wider "
                        "than the resolution (default 40)")
    p.add_argument("--no-length-check", dest="length_check", action="store_false",
                   help="skip checking the answer for the trace's length (the run at it "
                        "reaching steady state, and one probe on a trace twice as long; "
                        "skipped, an answer that depends on the trace's length goes "
                        "unnoticed)")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    from fileio.atomic import WriteFailed

    from ..io.interrupt import Stop, signals_stop
    from ..sweeps.capacity import CapacityError, Options, Stopped, find

    workload = load(args)
    limits = {k for k, v in asdict(workload.slo).items() if v is not None}
    if limits == {"tpot"}:
        print(f"steptrace: note: {args.workload}: slo: TPOT alone does not bound queueing: "
              f"an overloaded deployment queues requests and may still meet it at any rate; "
              f"add slo.ttft or slo.e2e", file=sys.stderr)
    given = dict(target=args.attainment, resolution=args.resolution,
                 max_probes=args.max_probes)
    options = Options(lowest=args.lowest, highest=args.highest, length_check=args.length_check,
                      **{k: v for k, v in given.items() if v is not None})
    stop = Stop()
    with signals_stop(stop):
        try:
            capacity = find(workload, tuple(args.set), options, stop, _progress)
        except CapacityError as e:
            raise BadInput(e) from None
        except Stopped as e:
            print(f"steptrace: interrupted by {stop.signal_name}: {e}", file=sys.stderr)
            return stop.exit_code
        except WriteFailed as e:  # an output could not be written (fileio/atomic.py)
            raise RunFailed(e) from e
        except Exception as e:  # a probe's run failed: report it, with what is on disk
            raise RunFailed(f"{type(e).__name__}: {e}") from e
    result = capacity.document  # written in its folder too: what `steptrace show` reads
    if args.json:
        print_json(result)
    else:
        print_text(result)
    return 1 if result["outcome"] in NOT_A_CAPACITY else 0


def _progress(row: dict) -> None:
    check = f" (length check, {row['requests']:,} requests)" if row["length_check"] else ""
    knob = f"{row['rate']:.4g} req/s" if row["concurrency"] is None else \
        f"{_in_flight(row['concurrency'])}, {row['rate']:.4g} req/s"
    print(f"  probe {row['probe']}: {knob}{check}: attainment "
          f"{_percent(row['attainment'])}: {'met' if row['met'] else 'missed'}", file=sys.stderr)


def print_text(r: dict) -> None:
    """The search's text output, from its --json document."""
    slo = ", ".join(f"{name} <= {limit:g} s" for name, limit in r["slo"].items())
    print(f"steptrace capacity: {r['name']} on {r['device']} (modeled, virtual clock); SLO "
          f"{slo}; target: {_percent(r['attainment_target'])} of requests meet it")
    closed = r.get("load_mode") == "concurrency"
    head = f"{'in flight':>9} " if closed else ""
    print(f"{'probe':>5} {head}{'rate req/s':>11} {'requests':>9} {'met':>4} {'attainment':>11} "
          f"{'goodput req/s':>14} {'out tok/s/device':>17} {'ttft p99 s':>11} "
          f"{'tpot p50 s':>11} {'tpot p99 s':>11}")
    knob = "concurrency" if closed else "rate"
    for p in sorted(r["probes"], key=lambda p: (p[knob], p["length_check"])):
        flight = f"{p['concurrency']:>9,} " if closed else ""
        print(f"{p['probe']:>5} {flight}{p['rate']:>11.4g} {p['requests']:>9,} "
              f"{'yes' if p['met'] else 'no':>4} "
              f"{_percent(p['attainment']):>11} {p['goodput']:>14.4g} "
              f"{p['output_tokens_per_device']:>17,.1f} {p['ttft_p99_s']:>11.4g} "
              f"{p['tpot_p50_s']:>11.4g} {p['tpot_p99_s']:>11.4g}")
    _print_answer(r)
    c = r["capacity"]
    if c is not None:
        at = "capacity" if r["outcome"] in ("capacity", "at_least") else \
            f"the highest {'concurrency' if _closed(r) else 'rate'} that met"
        print(f"  run at {at}: {c['run_dir']}")
    print(f"  probes and table: {r['table']}")


def _closed(r: dict) -> bool:
    return r.get("load_mode") == "concurrency"  # older documents: a rate search


def _knob(r: dict, p: dict) -> float:
    """The value a probe (or the capacity) set: requests in flight, or a rate."""
    return p["concurrency"] if _closed(r) else p["rate"]


def _value(r: dict, value: float) -> str:
    return _in_flight(int(value)) if _closed(r) else f"{value:.4g} req/s"


def _in_flight(n: int) -> str:
    return f"{n:,} request{'' if n == 1 else 's'} in flight"


def _print_answer(r: dict) -> None:
    c, lowest = r["capacity"], min(_knob(r, p) for p in r["probes"])
    what = "concurrency" if _closed(r) else "rate"
    # a closed loop's rate is what it achieved, beside its knob
    rate = f", {c['rate']:.4g} req/s" if c is not None and _closed(r) else ""
    if r["outcome"] == "probe_limit":
        _print_unresolved(r)
    elif r["outcome"] == "none":
        print(f"no capacity: even the lowest {what} probed, {_value(r, lowest)}, misses the "
              f"target (--lowest probes lower; or the SLO cannot be met on this deployment)")
    elif r["outcome"] == "trace_too_short":
        _print_too_short(r)
    elif r["outcome"] == "at_least":
        print(f"capacity: at least {_value(r, _knob(r, c))}{rate}, "
              f"{c['output_tokens_per_device']:,.1f} output tok/s per device: every {what} "
              f"probed met the target, up to the highest (--highest probes higher)")
    else:
        print(f"capacity: {_value(r, _knob(r, c))}{rate}, {c['output_tokens_per_device']:,.1f} "
              f"output tok/s per device (attainment {_percent(c['attainment'])}, goodput "
              f"{c['goodput']:.4g} req/s)")
        print(f"  resolution: it met the target at {_value(r, _knob(r, c))} and missed it at "
              f"{_value(r, c['missed_at'])} (+{c['missed_at'] / _knob(r, c) - 1:.1%}); modeled "
              f"on the {r['device']} profile")
    if r["outcome"] in ("capacity", "at_least"):
        print(f"  length check: {_length_verdict(r, r['length_check'])}")


def _length_verdict(r: dict, check: dict) -> str:
    steady = _steady(check)
    if check["status"] == "passed":
        return (f"on a trace twice as long ({check['requests']:,} requests) the target is met "
                f"at {_value(r, _knob(r, check))}, the answer less its resolution (attainment "
                f"{_percent(check['attainment'])}): the answer does not depend on the trace's "
                f"length{steady}")
    why = "off (--no-length-check)" if check["status"] == "off" else \
        f"not run: {check['reason']}"
    return f"{why}; the answer may depend on the trace's length{steady}"


def _steady(check: dict) -> str:
    """The run at the answer's steady-state window, where the check found one."""
    steady = check.get("steady_state")  # older documents: none
    if not (steady and steady["found"]):
        return ""
    return (f"; the run at the answer reached its steady state from {steady['start_s']:.4g} s "
            f"to the last arrival ({steady['end_s']:.4g} s)")


def _print_too_short(r: dict) -> None:
    c, check = r["capacity"], r["length_check"]
    steady = check.get("steady_state") or {"found": True}  # older documents: none
    if check["run_dir"] is None or _met(r, check["attainment"]):  # the steady state failed it
        _print_unsteady(r)
        return
    queue = "; too short a trace is mostly the closed loop's start and end" if _closed(r) \
        else "; too short a trace never builds the queue that saturation means"
    unsteady = "" if steady["found"] else \
        f"; nor did the run at the answer reach a steady state: {steady['reason']}"
    print(f"no capacity: the answer depends on the trace's length: {_value(r, _knob(r, c))} met "
          f"the target on {r['requests']:,} requests (attainment {_percent(c['attainment'])}), "
          f"but on {check['requests']:,} even {_value(r, _knob(r, check))}, the answer less its "
          f"resolution, misses it ({_percent(check['attainment'])}, goodput "
          f"{check['goodput']:.4g} req/s){queue}{unsteady}: use at least "
          f"{check['requests']:,} requests (--set {check['setting']})")


def _met(r: dict, attainment: Optional[float]) -> bool:
    return attainment is not None and attainment >= r["attainment_target"]  # None: NaN


def _print_unsteady(r: dict) -> None:
    """A length check failed by the run at the answer alone, which reached no steady state:
    its reason, the doubled trace's verdict where it ran, and the setting that lengthens
    it."""
    c, check = r["capacity"], r["length_check"]
    doubled = "; the trace file holds too few rows for a trace twice as long" \
        if check["run_dir"] is None else \
        (f"; on {check['requests']:,} requests {_value(r, _knob(r, check))}, the answer less "
         f"its resolution, meets it ({_percent(check['attainment'])})")
    print(f"no capacity: the answer depends on the trace's length: {_value(r, _knob(r, c))} met "
          f"the target on {r['requests']:,} requests (attainment {_percent(c['attainment'])}), "
          f"but that run reached no steady state: {check['steady_state']['reason']}{doubled}: "
          f"lengthen the trace (--set {check['setting']}, twice the requests, or more)")


def _print_unresolved(r: dict) -> None:
    met = [_knob(r, p) for p in r["probes"] if p["met"]]
    missed = [_knob(r, p) for p in r["probes"] if not p["met"]]
    what = "concurrency" if _closed(r) else "rate"
    if met and missed:
        low, high = max(met), min(missed)
        got = (f"the target met at {_value(r, low)} and missed at {_value(r, high)} "
               f"(+{high / low - 1:.1%}), wider than the resolution {r['resolution']:g}")
    elif met:
        got = f"every {what} probed meeting the target, up to {_value(r, max(met))}"
    else:
        got = f"every {what} probed missing the target, down to {_value(r, min(missed))}"
    print(f"no capacity: the search ran out of its {r['max_probes']} probes (--max-probes) "
          f"with {got}")


def _percent(share: Optional[float]) -> str:
    return "–" if share is None or share != share else f"{share:.1%}"  # NaN: JSON's null
