"""steptrace show RUN_DIR: a run's state and headline summary rows; with --vllm, its summary
in the words of vLLM's serving benchmark (harness/record/vllm_result.py); with --export, as
AIPerf's profile export or llm-d-benchmark's report v0.2 (JSON); given a capacity
search's folder (the command's or a sweep's point's), the search's answer and probes as
`steptrace capacity` printed them; given a sweep's folder, its table as `steptrace sweep`
printed it."""

from __future__ import annotations

import json
from pathlib import Path

from fileio.regular import check_regular

from ..errors import BadInput
from ..record import aiperf_result, llmd_report, vllm_result
from ..record.run import Run
from ..schema.summary import COUNT_UNITS, headline
from .common import add_json, print_json

SWEEP_TABLE = "sweep.parquet"  # a `steptrace sweep`'s folder holds it
EXPORTS = ("aiperf", "llm-d")


def add(p) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--vllm", action="store_true",
                   help="the summary as vLLM's serving benchmark prints it (`vllm bench "
                        "serve`: its labels, ms); with --json, the run's result.json fields")
    p.add_argument("--export", choices=EXPORTS,
                   help="the summary as JSON in a peer's fields: aiperf (AIPerf's "
                        "profile_export_aiperf.json) or llm-d (llm-d-benchmark's report v0.2)")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    folder = args.run_dir
    if not (folder / "manifest.json").exists():  # perhaps a capacity search's or a sweep's
        # here: `run` imports this module for print_text, not these
        from ..sweeps.capacity import RESULT_FILE

        if (folder / RESULT_FILE).exists():
            from . import capacity

            result = _read_search(folder / RESULT_FILE)
            print_json(result) if args.json else capacity.print_text(result)
            return 0
        if (folder / SWEEP_TABLE).exists():
            return _show_sweep(folder, args.json)
        if folder.is_dir():
            raise BadInput(f"{folder}: not a run directory (no manifest.json), nor a capacity "
                           f"search's folder ({RESULT_FILE}) or a sweep's ({SWEEP_TABLE})")
    run = Run.read(folder)
    if args.export:
        summary = run.result()["summary"]
        print_json(aiperf_result.result(summary, run.complete) if args.export == "aiperf"
                   else llmd_report.report(summary, folder.name))
    elif args.vllm:
        print_vllm(run, args.json)
    elif args.json:
        print_json(run.result())  # every summary row
    else:
        print_text(run.result())
    return 0


def _show_sweep(folder: Path, as_json: bool) -> int:
    """A sweep's table as `steptrace sweep` printed it (its --json document, less the sweep
    file's path, which the table does not hold)."""
    from ..analysis.report.sweep_data import read_sweep
    from .sweep_text import points, print_text

    table = read_sweep(folder)  # BadInput naming the file for a table that is not a sweep's
    df = table.rows.drop(columns=["group", "label"])
    outcomes = set(df["outcome"].dropna())
    mode = "run" if outcomes == {"run"} else "capacity" if outcomes else "unknown"
    result = dict(name=folder.name, mode=mode, folder=str(folder),
                  table=str(folder / SWEEP_TABLE), front_by=table.front_by,
                  **points(df))
    print_json(result) if as_json else print_text(result)
    return 0


def _read_search(path: Path) -> dict:
    """A capacity search's --json document, as the search wrote it in its folder."""
    try:  # a FIFO in its place would block the reader for ever
        return json.loads(check_regular(path).read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable ({e})") from None


def print_vllm(run: Run, as_json: bool) -> None:
    """vLLM's block and the run's notes, or (as_json) the result.json document with them."""
    result = run.result()
    if as_json:
        print_json(dict(vllm_result.result(result["summary"], run.manifest),
                        notes=result["notes"]))
        return
    print(f"{result['run_dir']}  [{result['state']}]  device {result['device']}"
          f"{' (modeled)' if result['modeled'] else ''}")
    for line in vllm_result.block(result["summary"]):
        print(line)
    for note in result.get("notes", ()):
        print(f"note: {note}")


def print_text(result: dict) -> None:
    state = result["state"] if result["complete"] else result["state"].upper()
    modeled = " (modeled)" if result["modeled"] else ""
    print(f"{result['run_dir']}  [{state}]  device {result['device']}{modeled}, "
          f"gil {result['gil_mode']}")
    rows = {(r["metric"], r["stat"]): r for r in result["summary"]}
    # the device table's utilisation and power means, and energy per token, side by side
    telemetry = [k for k, r in rows.items() if (k[1] == "mean" and r["unit"] in ("%", "W"))
                 or k[0] == "energy_per_output_token"]
    shown = headline(rows) + telemetry
    # a P/D run's names are longer (per_device output_tokens_per_decode_device)
    width = max([28] + [len(" ".join(k)) + 1 for k in shown if k[0] == "per_device"])
    for key in shown:
        r = rows[key]
        print(f"  {key[0] + ' ' + key[1]:{width}}{_number(r):>14} {r['unit']}")
    calibration = result.get("calibration")  # absent from older runs' manifests
    off = calibration.get("off") if isinstance(calibration, dict) else None
    if off:
        print(f"  note: harness calibration {off}")
    for note in result.get("notes", ()):
        print(f"  note: {note}")


def _number(row: dict) -> str:
    """A count as an integer (19,370 requests, not 1.937e+04); anything else to 4 digits."""
    value = row["value"]
    count = row["unit"] in COUNT_UNITS or row["stat"] == "count"
    return f"{value:,.0f}" if count and float(value).is_integer() else f"{value:.4g}"
