"""A session trace replayed open loop (docs/workloads.md, "Sessions"): `trace convert
--arrivals RUN` makes its turns plain requests at the arrivals a run of it recorded; at the
recorded rate that replay is the sessions run's, at twice the rate it overstates TTFT and
throughput (the bundled workloads/sessions_h200.yaml)."""

from pathlib import Path

import pandas as pd
import pytest

from harness.commands import main

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "workloads" / "sessions_h200.yaml"
TRACE = REPO / "workloads" / "traces" / "agentic_sessions.csv"


def run(out: Path, *sets: str) -> dict:
    """The run's folder and its summary's rows by (metric, stat)."""
    argv = ["run", str(WORKLOAD), "--set", f"output={out}"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    (folder,) = (out / "sessions-h200").iterdir()
    table = pd.read_parquet(folder / "summary.parquet")
    return dict(folder=folder, **{f"{m}.{s}": v for m, s, v in
                                  zip(table["metric"], table["stat"], table["value"])})


def convert(tmp_path: Path, src: Path, arrivals: Path) -> int:
    return main(["trace", "convert", str(src), str(tmp_path / "open.parquet"), "--arrivals",
                 str(arrivals), "--hash-block-size", "64"])


@pytest.mark.slow
def test_open_loop_overstates_ttft_and_throughput_at_twice_the_rate(tmp_path, capsys):
    recorded = run(tmp_path / "s1")
    assert convert(tmp_path, TRACE, recorded["folder"]) == 0
    open_loop = str(tmp_path / "open.parquet")
    same = run(tmp_path / "o1", f"trace.file={open_loop}")
    for key in ("ttft.p50", "ttft.p99", "throughput.requests", "throughput.output_tokens"):
        assert same[key] == pytest.approx(recorded[key], rel=1e-9), key
    sessions = run(tmp_path / "s05", "trace.time_scale=0.5")
    faster = run(tmp_path / "o05", f"trace.file={open_loop}", "trace.time_scale=0.5")
    assert faster["ttft.p50"] > 1.2 * sessions["ttft.p50"]
    assert faster["throughput.output_tokens"] > 1.5 * sessions["throughput.output_tokens"]


@pytest.mark.core
def test_arrivals_are_refused_from_another_trace_or_for_a_request_trace(tmp_path, capsys):
    other = tmp_path / "other.csv"
    lines = TRACE.read_text().splitlines()
    other.write_text("\n".join(lines[:12]) + "\n")  # the first turns only
    recorded = run(tmp_path / "s", f"trace.file={other}")
    assert convert(tmp_path, TRACE, recorded["folder"]) == 2
    assert "the run replayed another trace: 11 requests, the session trace's 921 turns" \
        in capsys.readouterr().err
    assert convert(tmp_path, REPO / "workloads" / "traces" / "synthetic_small.csv",
                   recorded["folder"]) == 2
    assert "is a request trace: its arrivals are its own" in capsys.readouterr().err
    assert not (tmp_path / "open.parquet").exists()
