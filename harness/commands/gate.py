"""steptrace gate CANDIDATE... --baseline BASELINE: the regression gate. Exit 0 pass,
1 a regression (a rule broken) or a change (a modeled table differs), 2 bad input
(docs/comparing.md, "The gate")."""

from __future__ import annotations

import shlex
from pathlib import Path

from fileio.atomic import WriteFailed

from ..errors import BadInput, RunFailed
from .common import add_json, fail, print_json


def add(p) -> None:
    p.description = ("Modeled runs must reproduce the baseline's steps, batches and requests "
                     "tables exactly; --rules judges summary metrics. --update stores the "
                     "candidates as the baseline instead.")
    p.add_argument("candidates", nargs="+", metavar="CANDIDATE",
                   help="run folders, globs or folders holding runs")
    p.add_argument("--baseline", required=True, metavar="BASELINE",
                   help="a stored baseline (results/baselines/NAME) or run folders")
    p.add_argument("--rules", type=Path, metavar="RULES.yaml",
                   help="limits on summary metrics, e.g. `ttft.p99: {max_increase: 5%%}`")
    p.add_argument("--bench", action="store_true",
                   help="CANDIDATE is a pytest-benchmark JSON file (--benchmark-json) and "
                   "BASELINE a stored ratios file (tests/bench/ratios.json): judge the C++ "
                   "/ reference ratios (with --update: the lowest ratio of each case over "
                   "the files given is stored)")
    p.add_argument("--update", action="store_true",
                   help="store the candidates as the baseline folder BASELINE instead of "
                   "gating them: a new path, or a baseline --update made (replaced whole)")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    from ..analysis.gate import gate
    from ..analysis.rules import load_rules
    from ..analysis.runs import load_runs

    if args.bench:
        return _bench(args)
    candidates = load_runs(args.candidates)
    if args.update:
        return _update(args, candidates)
    baseline = load_runs([args.baseline])
    metrics = set().union(*(run.metrics() for run in baseline))
    rules = load_rules(args.rules, metrics) if args.rules else []
    endpoint = next((run for run in (*candidates, *baseline)
                     if run.manifest.target is not None), None)
    if endpoint is not None and not rules:
        raise BadInput(f"{endpoint.path}: a run against an endpoint has no steps or batches "
                       f"tables, so the exact gate does not apply: give --rules FILE to "
                       f"judge its summary")
    if not baseline[0].modeled and not rules:
        raise BadInput(f"{args.baseline}: a measured baseline is judged by rules only: give "
                       f"--rules FILE")
    result = gate(candidates, baseline, rules)
    if args.json:
        print_json(result.to_dict())
    else:
        print_text(result, args.baseline)
    return 0 if result.passed else 1


def _update(args, candidates) -> int:
    """Store the candidates as the baseline folder: only onto a new path or a baseline
    store() made (docs/comparing.md, "The gate")."""
    from ..analysis import baseline as stored
    from ..analysis.compare import differing_keys
    from ..analysis.gate import check_comparable, check_complete

    stored.check_destination(Path(args.baseline), candidates)
    names = [run.name for run in candidates]
    twice = [run for run in candidates if names.count(run.name) > 1]
    if twice:
        raise BadInput(f"--update: {len(twice)} candidate runs named {twice[0].name} "
                       f"({', '.join(str(r.path) for r in twice)}): a baseline holds each run "
                       f"under its folder's name")
    check_complete(candidates, "candidate", "a baseline holds complete runs only")
    check_comparable(candidates[1:], candidates[:1])  # one workload, one trace, one kind
    differ = differing_keys(candidates[:1], candidates[1:]) if len(candidates) > 1 else {}
    if differ:
        key, (a, b) = next(iter(differ.items()))
        raise BadInput(f"--update: a baseline's runs share every workload key; {key} is "
                       f"{a[0]!r} in {candidates[0].path} but {b} in others")
    command = shlex.join(["steptrace", "gate", *args.candidates, "--baseline", args.baseline,
                          "--update"])
    try:
        written = stored.store(candidates, Path(args.baseline), command)
    except WriteFailed as e:
        raise RunFailed(e) from e
    except stored.Interrupted as e:
        return fail(f"steptrace: interrupted by {e}: {args.baseline} "
                    f"{'replaced whole' if e.replaced else 'left as it was'}", 128 + e.signum)
    if args.json:
        print_json(dict(baseline=args.baseline, runs=[str(p) for p in written]))
    else:
        print(f"baseline {args.baseline}: stored {len(written)} run(s)")
    return 0


def _bench(args) -> int:
    from ..analysis import bench_ratios

    if args.rules:
        raise BadInput("gate --bench: judges the ratios of tests/bench/ratios.json; no --rules")
    if args.update:  # the lowest ratio of each case over the files given
        bench_jsons = [Path(p) for p in args.candidates]
        bench_ratios.check_destination(Path(args.baseline), bench_jsons)
        try:
            ratios = bench_ratios.store(bench_jsons, Path(args.baseline))
        except WriteFailed as e:
            raise RunFailed(e) from e
        if args.json:
            print_json(dict(baseline=args.baseline, ratios=ratios))
        else:
            print(f"baseline {args.baseline}: stored {len(ratios)} ratio(s)")
        return 0
    if len(args.candidates) != 1:
        raise BadInput("gate --bench: one pytest-benchmark JSON file to judge")
    (bench_json,) = args.candidates
    checks = bench_ratios.check(Path(bench_json), Path(args.baseline))
    passed = not any(c.broken for c in checks)
    if args.json:
        print_json(dict(passed=passed, checks=[dict(c.__dict__, broken=c.broken)
                                               for c in checks]))
    else:
        print(f"gate --bench: {bench_json} against {args.baseline}: "
              f"{'pass' if passed else 'REGRESSION'}")
        print(f"  {'case (reference / C++)':32}{'baseline':>10}{'floor':>10}{'measured':>10}")
        for c in checks:
            print(f"  {c.case:32}{c.baseline:>10.1f}{c.floor:>10.1f}{c.measured:>10.1f}  "
                  f"{'BROKEN' if c.broken else 'ok'}")
    return 0 if passed else 1


def print_text(result, baseline: str) -> None:
    verdict = {"pass": "pass", "changed": "CHANGED", "regression": "REGRESSION"}
    arms = f", arms {'; '.join(result.arms)}" if result.arms else ""
    print(f"gate: {len(result.candidates)} candidate run(s) against {baseline} "
          f"({len(result.baseline)} run(s){arms}): {verdict[result.verdict]}")
    for key, (a, b) in result.differing_keys.items():
        print(f"  differs from the baseline: {key}: {_values(a)} -> {_values(b)}")
    name = max([26] + [len(c.check) + 1 for c in result.checks])  # session_prefix_hit...
    print(f"  {'check':{name}}{'rule':18}{'baseline':>22} {'candidate':>22}  result")
    for c in result.checks:
        print(f"  {c.check:{name}}{c.rule:18}{c.baseline:>22} {c.candidate:>22}  {c.result}")
        print(f"      {c.arm + ': ' if c.arm else ''}{c.detail}")
    if result.verdict == "changed":
        print("  the modeled tables differ from the baseline's: a change in behaviour, "
              "neither better nor worse by itself (--rules judge figures); if it is meant, "
              "store these runs with --update")


def _values(values) -> str:
    return str(values[0]) if len(values) == 1 else "{" + ", ".join(map(str, values)) + "}"
