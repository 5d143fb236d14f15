"""What survives a killed or failing run: fault injection through the CLI, in subprocesses.

SIGKILL at random points of a long modeled replay (the harness's process only, as the OOM
killer does): the table writer's process closes every table with each chunk it was
handed, marks the manifest, and `steptrace show` reads the folder and calls it killed.
A write that fails mid-table (RLIMIT_FSIZE: the kernel refuses to grow a file, as a full
disk does) stops the run soon after, fails it with exit 1, and leaves no table under a
final name that does not read.
"""

import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 1024  # the recorder's chunk, in steps
KILL_AT = random.Random(14)  # seconds into the replay: fixed, so a failure reproduces
LONG = """name: long
trace:
  generate:
    requests: 200000
    rate: 5.5556
    prompt: {lognormal: {median: 512, sigma: 1.0, min: 16, max: 16384}}
    output: {lognormal: {median: 104, sigma: 0.8, min: 8, max: 4096}}
engine: {max_num_batched_tokens: 16384, max_num_seqs: 256, num_kv_blocks: 65536, block_size: 64}
model: deepseek-v4-flash
device: modeled:B200
precision: fp8
deployment: {devices: 8, attention: {tp: 8}, dense: {tp: 8}}
calibration_requests: 0
telemetry: {enabled: false}
"""


def steptrace(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "harness.commands", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def show(run_dir):
    proc = steptrace("show", str(run_dir), "--json")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out)


def started_run(out: Path, timeout=120) -> Path:
    """The run folder, once the replay is under way (its manifest is written first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list(out.glob("long/*/manifest.json"))
        if found:
            return found[0].parent
        time.sleep(0.02)
    raise AssertionError("the run never started")


# two kill points, early and late (a third at 1.70 s took the path 1.82 s does)
@pytest.mark.parametrize("delay_s", sorted(KILL_AT.uniform(0.2, 2.5) for _ in range(2)))
def test_a_run_killed_at_any_point_keeps_every_chunk(tmp_path, delay_s):
    workload = tmp_path / "long.yaml"
    workload.write_text(LONG + f"output: {tmp_path / 'out'}\n")
    proc = steptrace("run", str(workload))
    run_dir = started_run(tmp_path / "out")
    time.sleep(delay_s)
    proc.kill()
    try:  # ends when the table writer does: it holds this stderr
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(f"the table writer never ended:\n{hung.stderr}") from None
    assert proc.returncode == -signal.SIGKILL
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert "killed" in manifest, f"the table writer never marked the run killed:\n{err}"
    assert not manifest["complete"] and "ended" not in manifest

    result = show(run_dir)
    assert result["state"] == "killed" and not result["complete"]
    names = sorted(p.name for p in run_dir.iterdir())
    assert not [n for n in names if n.endswith(".tmp")], names  # nothing half-written
    if "steps.parquet" not in names:  # killed before the first chunk was handed over
        assert not {"batches.parquet", "requests.parquet"} & set(names)
        return
    steps = pd.read_parquet(run_dir / "steps.parquet")
    assert len(steps) % CHUNK == 0 and steps["step"].tolist() == list(range(len(steps)))
    batches = pd.read_parquet(run_dir / "batches.parquet")
    assert set(batches["step"]) <= set(steps["step"])
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert requests["request_id"].is_unique and (requests["status"] == "finished").all()
    rows = {(r["metric"], r["stat"]): r["value"] for r in result["summary"]}
    assert rows[("steps", "recorded")] == len(steps) and rows[("step", "count")] == len(steps)


def test_a_table_that_cannot_grow_fails_the_run_and_is_not_left_torn(tmp_path):
    workload = tmp_path / "long.yaml"
    workload.write_text(LONG + f"output: {tmp_path / 'out'}\n")

    def small_files():  # the kernel refuses to grow any file past 256 KiB (EFBIG)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    proc = steptrace("run", str(workload), preexec_fn=small_files)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "run failed" in err and "File too large" in err and "Traceback" not in err
    (run_dir,) = (tmp_path / "out" / "long").iterdir()
    for path in run_dir.iterdir():
        assert not path.name.endswith(".tmp"), path
        if path.suffix == ".parquet":
            pd.read_parquet(path)  # every table under its final name reads
    if (run_dir / "steps.parquet").exists():  # the run stopped soon after, not 280,000 steps on
        assert len(pd.read_parquet(run_dir / "steps.parquet")) <= 16 * CHUNK
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert not manifest["complete"] and "File too large" in manifest["error"]
    assert show(run_dir)["state"] == "failed"


def test_a_run_still_going_is_shown_as_running(tmp_path):
    workload = tmp_path / "long.yaml"
    workload.write_text(LONG + f"output: {tmp_path / 'out'}\n")
    proc = steptrace("run", str(workload))
    try:
        run_dir = started_run(tmp_path / "out")
        assert show(run_dir)["state"] == "running"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    assert show(run_dir)["state"] in ("interrupted", "complete")
    assert os.path.exists(run_dir / "summary.parquet")
