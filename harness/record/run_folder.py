"""A run folder's parts read back: its manifest, state, summary rows and notes (what
harness/record/run.py makes a Run of), and manifest.json written.
The columns are docs/tables.md's; the recorder streams the steps, batches and requests
tables.

The manifest is written to a temporary name and renamed into place, as every table is; it
says `complete: false` until the run ended cleanly.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime
from pathlib import Path
from typing import List

import pandas as pd

from fileio.atomic import atomic_open
from fileio.regular import check_regular

from ..errors import BadInput
from ..schema.manifest import Manifest, view
from ..schema.values import STATUSES
from .busy_host import busy_host, note
from .metrics import SUMMARY_COLUMNS
from .table_reader import read_frame, table_file


def write_manifest(manifest: dict, run_dir: Path) -> None:
    with atomic_open(Path(run_dir) / "manifest.json") as f:
        f.write(json.dumps(manifest, indent=2, default=str) + "\n")


def summary_rows(run_dir: Path, state: str) -> List[dict]:
    """Every summary row (metric, stat, value, unit) of the run folder. A run without a
    summary (killed, failed, or still running) gets the engine summary of the steps it
    holds; BadInput for a run that ended with a summary that is not one."""
    try:
        summary = _read(run_dir, "summary")
    except (OSError, ValueError) as e:
        if state in ("complete", "interrupted"):
            raise BadInput(f"{run_dir}: the run ended but its summary is unreadable ({e})") \
                from None
        summary = _steps_summary(run_dir)
    missing = [c for c in ("metric", "stat", "value", "unit") if c not in summary.columns]
    if missing or (len(summary) and not pd.api.types.is_numeric_dtype(summary["value"])):
        what = f"no column(s) {', '.join(missing)}" if missing else "values that are not numbers"
        raise BadInput(f"{run_dir}: the summary table is not a run's summary ({what})")
    return summary[["metric", "stat", "value", "unit"]].to_dict("records")


def notes(manifest: Manifest, rows: List[dict], run_dir: Path, state: str) -> List[str]:
    """What the run's figures need said beside them: why it failed, why every statistic is
    NaN, an engine behind its arrivals, what timed a modeled run's steps, a busy host."""
    failed = [f"the run failed: {manifest.error}"] if state == "failed" else []
    busy = busy_host(manifest, ((r["metric"], r["stat"], r["value"]) for r in rows))
    return failed + _notes(rows, run_dir, state) + _behind(rows, manifest) \
        + _step_models(manifest, rows) + ([note(busy)] if busy else [])


LINK_PARTS = ("dispatch", "combine", "allreduce")  # timed by the link model without a table


def untimed_parts(missing) -> list:
    """[(what timed them, parts)] of the parts a step model's tables lack: the link model
    the all-to-alls and all-reduces, rooflines the rest; only those with parts."""
    return [(how, parts) for how, parts in (
        ("the link model", [p for p in missing if p in LINK_PARTS]),
        ("rooflines", [p for p in missing if p not in LINK_PARTS])) if parts]


def _step_models(manifest: Manifest, rows) -> list:
    """What a modeled run's steps were timed by (docs/modeling.md), where kernel tables
    timed any part: each instance's (or each P/D pool's) tables and the parts left to
    rooflines or the link model, and the measured steps with a part looked up outside its
    table's rows."""
    pools = manifest.pools
    models = [(f"{role} pool: ", p.get("step_model")) for role, p in pools.items()] \
        if isinstance(pools, dict) else [("", manifest.step_model)]
    notes = [f"{where}{_step_model(m)}" for where, m in models
             if isinstance(m, dict) and m.get("timed")]  # a roofline step: the profile says
    extrapolated = {(r["metric"], r["stat"]): r["value"] for r in rows}.get(
        ("extrapolated", "steps")) or 0
    if extrapolated:
        notes.append(f"{extrapolated:,.0f} measured steps had a part looked up outside its "
                     f"kernel table's rows (the steps table's `extrapolated` names the parts)")
    return notes


def _step_model(m: dict) -> str:
    timed, missing = m["timed"], m.get("missing") or {}
    if m.get("table") == "roofline":
        text = f"modeled step: rooflines per kernel family ({m.get('source')})"
    else:
        source = str(m.get("source", "")).split(",")[0]
        text = f"modeled step: {m.get('stack')} kernel tables ({m.get('table')}; {source})"
    text += _decode_streams(m.get("decode_streams") or {})
    for how, parts in untimed_parts(missing):
        text += f"; by {how}: " + ", ".join(
            f"{part}{' in part' if part in timed else ''}" for part in parts)
    if missing:
        text += " (the manifest's step_model names each curve the tables lack)"
    return text


def _decode_streams(streams: dict) -> str:
    """How the stack runs a decode step beyond its kernels' times, where it does."""
    scale = streams.get("layer_scale") or {}
    said = (["shared experts beside the routed path"] if streams.get("shared_beside_routed")
            else []) + ([f"each layer's kernels at {scale['value']:g} of their time (PDL, "
                         f"{scale.get('kind')})"] if scale.get("value", 1.0) != 1.0 else [])
    return "; decode steps: " + ", ".join(said) if said else ""


def read_manifest(run_dir: Path) -> Manifest:
    """The run's manifest.json, typed, its JSON checked where the view's types do not
    (device.name and gil_mode text, values a mapping); BadInput for anything but a run's
    manifest."""
    run_dir = Path(run_dir)
    try:  # a FIFO in its place would block the reader for ever
        text = check_regular(run_dir / "manifest.json").read_text()
    except (OSError, ValueError) as e:
        raise BadInput(f"{run_dir}: not a run directory ({e})") from None
    try:
        manifest = json.loads(text)
        if not isinstance(manifest, dict):
            raise TypeError(f"a JSON {type(manifest).__name__}, not an object")
        device, gil_mode = manifest["device"]["name"], manifest["gil_mode"]
        if not isinstance(device, str) or not isinstance(gil_mode, str):
            raise TypeError(f"device.name and gil_mode are not text: {device!r}, {gil_mode!r}")
        if not isinstance(manifest.get("values", {}), dict):
            raise TypeError(f"values is not a mapping: {str(manifest['values'])[:60]!r}")
    except RecursionError:
        raise BadInput(f"{run_dir / 'manifest.json'}: JSON nested too deeply") from None
    except ValueError as e:
        raise BadInput(f"{run_dir / 'manifest.json'}: not valid JSON ({e})") from None
    except (KeyError, TypeError) as e:
        what = f"no key {e}" if isinstance(e, KeyError) else str(e)
        raise BadInput(f"{run_dir / 'manifest.json'}: not a run's manifest ({what})") from None
    return view(manifest)


def _notes(rows, run_dir: Path, state: str = "complete") -> list:
    """Why every statistic is NaN (it is valid, and silent): every step or request was
    warm-up (in a run that ended early, because it ended early), every request was
    rejected, or none finished."""
    value = {(r["metric"], r["stat"]): r["value"] for r in rows}.get
    warm = value(("requests", "warmup")) or 0
    count = {s: value(("requests", s)) or 0 for s in STATUSES}
    measured = sum(count.values())
    if warm and state != "complete" and (not measured or value(("step", "count"), -1) == 0):
        return [f"the run was {state} during its warm-up steps: none of the {warm:.0f} "
                f"requests scheduled was measured, so every statistic is NaN"]
    if warm and value(("step", "count"), -1) == 0:
        return [f"every step was a warm-up step (warmup_steps is not below the run's steps): "
                f"no step and none of the {warm:.0f} requests was measured, so every "
                f"statistic is NaN; lower warmup_steps"]
    if warm and not measured:
        return [f"all {warm:.0f} requests were first scheduled in warm-up steps: none was "
                f"measured, so every latency and throughput statistic is NaN; lower "
                f"warmup_steps"]
    if measured and count["rejected"] == measured:
        return [f"every request ({measured:,.0f}) was rejected, so every latency and "
                f"throughput statistic is NaN{_first_reason(run_dir)}"]
    if measured and not count["finished"] and not count["handed_off"]:
        return [f"no request finished ({count['unfinished']:,.0f} unfinished, "
                f"{count['rejected']:,.0f} rejected), so every latency statistic is NaN"]
    return []


BEHIND_S = 1.0  # a median wait for the first schedule beyond this is the engine's queue


def _behind(rows, manifest: Manifest) -> list:
    """The engine slower than the requests' arrivals: latencies that measure its queue.
    Not said of a closed loop or an offline load, whose queue is there by design."""
    load = ((manifest.values or {}).get("load") or {}).get("mode", "trace")
    if load != "trace":
        return []
    value = {(r["metric"], r["stat"]): r["value"] for r in rows}.get
    wait = value(("queueing_delay", "p50"))
    if wait is None or not wait > BEHIND_S:
        return []
    return [f"the engine fell behind the arrivals: half the requests waited {wait:.3g} s or "
            f"more for their first schedule (queueing_delay p50), so the latencies measure "
            f"its queue more than its steps; a lighter load (trace.limit, trace.time_scale, "
            f"load.concurrency) measures the engine"]


def _first_reason(run_dir: Path) -> str:
    """': <the first rejected request's reason>', from the requests table if it reads."""
    try:
        requests = _read(run_dir, "requests")
        reasons = requests.loc[requests["status"] == "rejected", "reason"]
    except (OSError, ValueError, KeyError):
        return ""
    return f"; the first: {reasons.iloc[0]}" if len(reasons) and reasons.iloc[0] else ""


def state(manifest: Manifest) -> str:
    """complete, failed (the run raised, or a table could not be written: the manifest
    holds its error), interrupted (Ctrl-C or SIGTERM: the tables whole), killed (the
    process ended without closing the run) or running."""
    if manifest.complete:
        return "complete"
    if manifest.error is not None:
        return "failed"
    if manifest.ended is not None:
        return "interrupted"
    if manifest.killed is not None or not _alive(manifest.pid, manifest.host):
        return "killed"
    return "running"


def _alive(pid, host) -> bool:
    if type(pid) is not int or not 0 < pid < 2 ** 31 or host != socket.gethostname():
        return True  # cannot tell: say running, not killed (0 and -1 would name groups)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the number
        return True
    return True


def _steps_summary(run_dir: Path) -> pd.DataFrame:
    """What the steps table of an unfinished run says: its step count and the engine
    summary (no MFU: the device's peak is the run's to know)."""
    from .step_summary import engine_summary

    try:
        steps = _read(run_dir, "steps")
    except (OSError, ValueError):
        return pd.DataFrame([], columns=list(SUMMARY_COLUMNS))
    recorded = pd.DataFrame([("steps", "recorded", float(steps["step"].nunique()), "steps")],
                            columns=list(SUMMARY_COLUMNS))
    return pd.concat([recorded, engine_summary(steps, None)], ignore_index=True)


def _read(run_dir: Path, name: str) -> pd.DataFrame:
    path = table_file(run_dir, name)
    if path is None:
        raise ValueError(f"no {name} table")
    return read_frame(path)


def new_run_dir(base: Path, arm: str) -> Path:
    """A new folder base/<date-time>-<arm>, never one that existed (a run's, a search's).
    A symbolic link as base is refused: a run writes only where its workload says."""
    if base.is_symlink():
        raise BadInput(f"{base} is a symbolic link (to {os.readlink(base)}): a run "
                            f"writes its folder only where output and name say; remove the "
                            f"link or set output to where it points")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # an output the workload names that cannot hold folders
        raise BadInput(f"cannot make the run folder {base}: {e.strerror}") from None
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        run_dir = base / (f"{stamp}-{arm}" + (f"-{n}" if n else ""))
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run directory under {base}")
