"""`tokens: true` writes every output token; `sampling: greedy` makes them independent of
how requests are batched."""

import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness.schema import LABELS, arrow_schema
from harness.sweeps.sweep import run_workload
from harness.workload import WorkloadError, load_workload

REQUESTS = 8
BODY = """trace:
  generate: {{requests: {n}, rate: 1000, prompt: {{uniform: [4, 40]}}, output: {{fixed: 6}}}}
load: {{mode: offline}}
engine: {{max_num_batched_tokens: 256, num_kv_blocks: 256, max_num_seqs: {seqs}, num_mtp: 1}}
model: tiny
device: cpu
clock: virtual
calibration_requests: 0
telemetry: {{enabled: false}}
tokens: true
"""


def workload(tmp_path, name, extra="", seqs=8):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\nname: {name}\n"
                    + BODY.format(n=REQUESTS, seqs=seqs) + extra)
    return load_workload(path)


def tokens(tmp_path, name, extra="", seqs=8):
    (run,) = run_workload(workload(tmp_path, name, extra, seqs))
    run_dir = run.path
    got = pq.read_schema(run_dir / "tokens.parquet").remove_metadata()
    assert got == arrow_schema("tokens", LABELS)  # as declared (docs/tables.md)
    return pd.read_parquet(run_dir / "tokens.parquet")


@pytest.mark.slow
def test_greedy_tokens_do_not_depend_on_batching(tmp_path):
    one = tokens(tmp_path, "one", "sampling: greedy\n", seqs=1)
    eight = tokens(tmp_path, "eight", "sampling: greedy\n", seqs=8)
    assert list(one.columns)[:3] == ["request_id", "position", "token_id"]
    assert len(one) == REQUESTS * 6  # every output token of every request
    assert one.groupby("request_id")["position"].apply(list).map(lambda p: p == list(range(6))).all()
    pd.testing.assert_frame_equal(one[["request_id", "position", "token_id"]],
                                  eight[["request_id", "position", "token_id"]])


@pytest.mark.slow
def test_the_engines_sampling_accepts_seeded_drafts_whatever_the_model_says(tmp_path):
    """The default sampling's MTP acceptance model commits drafts by a seeded draw, row
    after row: another batching commits other tokens."""
    one = tokens(tmp_path, "one", "", seqs=1)
    eight = tokens(tmp_path, "eight", "", seqs=8)
    assert len(one) == len(eight) == REQUESTS * 6
    assert (one["token_id"].to_numpy() != eight["token_id"].to_numpy()).any()


@pytest.mark.parametrize("extra, key", [
    ("tokens: true\n", "tokens"), ("sampling: greedy\n", "sampling")])
def test_tokens_need_a_torch_device(tmp_path, extra, key):
    path = tmp_path / "w.yaml"
    path.write_text("trace: {generate: {requests: 2}}\ndevice: modeled:B200\n" + extra)
    with pytest.raises(WorkloadError, match=rf"w.yaml:\d+: {key}: a modeled:B200 device "
                                            r"samples no tokens"):
        load_workload(path)
