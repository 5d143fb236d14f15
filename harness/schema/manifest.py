"""A run's `manifest.json`, declared once: every key a run writes, its JSON kind and its
meaning (docs/tables.md, "manifest.json", is rendered from it; tests/test_manifest.py
checks a real run's manifest against it). Readers read a manifest through its typed view,
`view(manifest)` (harness/schema/manifest_view.py, generated from the declaration: `python
-m harness.schema.manifest`), whose executor_kind and profile are `executor_of`'s, never
the executor's text split by themselves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from .manifest_view import Manifest


@dataclass(frozen=True)
class Key:
    name: str
    kinds: Tuple[str, ...]  # JSON kinds: string, integer, number, boolean, object, array, null
    meaning: str
    when: str = ""  # "" for a key every run writes; else when it is there


STRING, INTEGER, NUMBER, BOOLEAN = "string", "integer", "number", "boolean"
OBJECT, ARRAY, NULL = "object", "array", "null"
PD, RANKS = "a P/D deployment's run", "a run over engine processes, one per device"

MANIFEST = (
    Key("workload", (STRING,), "the workload file, its absolute path"),
    Key("workload_sha256", (STRING,), "the workload file's SHA-256"),
    Key("trace", (STRING,), "the trace file replayed, or `generated`"),
    Key("trace_sha256", (STRING, NULL), "the trace file's SHA-256; null for a generated trace"),
    Key("trace_rows", (INTEGER,), "requests in the trace as replayed (scaled and limited)"),
    Key("trace_dropped", (OBJECT,), "rows dropped while reading the trace, by reason"),
    Key("values", (OBJECT,), "the workload's every key, defaults filled and `--set` applied"),
    Key("gil_mode", (STRING,), "the GIL arm: `released` or `held`"),
    Key("repeat", (INTEGER,), "the repeat's index among the arm's runs"),
    Key("switch_interval_s", (NUMBER,), "the interpreter's switch interval during the run"),
    Key("git_sha", (STRING, NULL), "the commit under test ($STEPTRACE_COMMIT, else the "
                              "checkout's HEAD); null outside a checkout, and against an "
                              "endpoint without $STEPTRACE_COMMIT (its engine is not the "
                              "checkout)"),
    Key("git_date", (STRING, NULL), "that commit's date, ISO 8601"),
    Key("versions", (OBJECT,), "python, steptrace, torch (null when not installed) and numpy"),
    Key("host_cpu", (STRING,), "the host's CPU model"),
    Key("host_cpus", (INTEGER,), "the host's logical CPUs"),
    Key("device", (OBJECT,), "the device the host ran: backend, name, chip, capability"),
    Key("executor", (STRING,), "the workload's executor as given: `torch`, or "
                          "`<kind>:<profile>` (`modeled:B200`)"),
    Key("executor_kind", (STRING,), "how steps ran: `torch`, `modeled`, `emulated`, `null` or "
                                "`endpoint` (a run against an endpoint)"),
    Key("profile", (STRING, NULL), "the device profile the executor names (`B200`, or a path); "
                              "null for torch"),
    Key("modeled", (BOOLEAN,), "whether steps were timed by the step model, not measured"),
    Key("modeled_device", (STRING, NULL), "the modeled device's name, from its profile"),
    Key("device_profile", (OBJECT, NULL), "the profile's figures, each with its source"),
    Key("step_model", (OBJECT, NULL), "a modeled run's step model: its kernel tables, or the "
                                 "roofline"),
    Key("kv_pool", (OBJECT, NULL), "the KV pool as sized: blocks and how they were sized"),
    Key("started", (STRING,), "when the run started, UTC, ISO 8601"),
    Key("complete", (BOOLEAN,), "whether the run ended and wrote every table"),
    Key("pid", (INTEGER,), "the harness's process, while the run is written"),
    Key("host", (STRING,), "the host's name (with `pid`: a running run's writer)"),
    Key("block", (INTEGER,), "the interleaved GIL protocol's block"),
    Key("order", (INTEGER,), "the run's place in its block"),
    Key("calibration", (OBJECT,), "the null-engine calibration's figures, or why it is off"),
    Key("interrupted", (BOOLEAN,), "whether a signal stopped the run"),
    Key("ended", (STRING,), "when the run ended, UTC, ISO 8601", "a run that ended"),
    Key("host_share", (OBJECT, NULL), "other processes' CPU and steal time, and whether they "
                                 "passed the contamination threshold", "a run that ended"),
    Key("telemetry", (OBJECT,), "each telemetry source and what it read", "a run that ended"),
    Key("pools", (OBJECT,), "the prefill and decode pools: instances, devices, shapes", PD),
    Key("ranks", (ARRAY,), "each engine process: rank, pid, role, instance, DP rank", RANKS),
    Key("served", (OBJECT,), "the server: its url, model, limits and the requests it "
                             "took (the trace is `served`, trace_rows its capacity)",
        "a served run (`steptrace serve`)"),
    Key("target", (OBJECT,), "the endpoint the requests went to: its url, model and api, "
                             "the tables written (no engine here: no steps or batches), "
                             "the send lag (`send_lag_s`: each request's send time less its "
                             "arrival, described) and the /metrics scrapes (`metrics`: url, "
                             "interval, scrapes, samples; `stopped`: why a scrape failed; "
                             "`off`: none asked for)", "a run against an endpoint (`target:`)"),
    Key("error", (STRING,), "why the run failed", "a failed run"),
    Key("killed", (OBJECT,), "when a killed run was found, and what its tables hold",
        "a run whose harness died"),
)
KEYS = {k.name: k for k in MANIFEST}


def executor_of(manifest: dict) -> Tuple[str, Optional[str]]:
    """(the executor's kind, its profile or None): the manifest's own keys; a manifest
    written before they were declared, from its executor's text."""
    if "executor_kind" in manifest:
        return str(manifest["executor_kind"]), manifest.get("profile")
    kind, _, profile = str(manifest.get("executor", "")).partition(":")
    return kind, profile or None


def view(manifest: dict) -> Manifest:
    """The manifest typed: each declared key an attribute, None where it is absent (a key
    written only for some runs, or one an older run did not write yet), the executor's
    kind and profile from `executor_of`; keys not declared are left out."""
    values = {k: manifest.get(k) for k in KEYS}
    values["executor_kind"], values["profile"] = executor_of(manifest)
    return Manifest(**values)


PYTHON = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
          "object": "Dict[str, Any]", "array": "List[Any]"}
VIEW = Path(__file__).with_name("manifest_view.py")


def view_source() -> str:
    """harness/schema/manifest_view.py as the declaration makes it: a frozen dataclass, a
    field per key, every one optional (older manifests lack newer keys)."""
    fields = []
    for k in MANIFEST:
        kinds = [PYTHON[kind] for kind in k.kinds if kind != NULL]
        assert len(kinds) == 1, f"{k.name}: one JSON kind, or it and null"
        kind = kinds[0]
        fields.append(f"    {k.name}: Optional[{kind}] = None")
    return ('"""A run\'s manifest.json, typed: an attribute per key harness/schema/manifest.py '
            'declares,\nNone where the manifest lacks it. Generated from the declaration by '
            '`python -m\nharness.schema.manifest`; tests/test_manifest.py checks it is '
            'current."""\n\n'
            "from __future__ import annotations\n\n"
            "from dataclasses import dataclass\n"
            "from typing import Any, Dict, List, Optional\n\n\n"
            "@dataclass(frozen=True)\nclass Manifest:\n" + "\n".join(fields) + "\n")


if __name__ == "__main__":
    VIEW.write_text(view_source())
