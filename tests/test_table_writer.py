"""The table writer's process: what crosses the pipe arrives whole, and a pipe that ends
early (the harness killed mid-message) leaves whole tables of every message received."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from harness.schema import TABLES
from harness.table_writer import TableWriter, frame


def batches(first_step: int, n: int = 3) -> dict:
    return dict(step=np.arange(first_step, first_step + n, dtype=np.int64),
                dp_rank=np.zeros(n, np.int32), seq_id=np.arange(n, dtype=np.int64),
                kind=np.array([0, 1, 2][:n], np.int8), seqlen_q=np.ones(n, np.int32),
                seqlen_k=np.full(n, 7, np.int32))


def test_columns_cross_whole_with_their_dictionaries_and_labels(tmp_path):
    writer = TableWriter(tmp_path, "parquet", ["batches"], dict(run_id="r"),
                         dict(kind=("chunk", "final", "decode")))
    writer.write(dict(batches=batches(0)))
    writer.write(dict(batches=batches(3)))
    writer.close()
    table = pd.read_parquet(tmp_path / "batches.parquet")
    assert table["step"].tolist() == list(range(6))
    assert table["kind"].tolist() == ["chunk", "final", "decode"] * 2
    assert set(table.columns) == set(TABLES["batches"].names) | {"run_id"}
    assert sorted(os.listdir(tmp_path)) == ["batches.parquet"]


def test_a_pipe_cut_mid_message_keeps_every_whole_message(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(dict(complete=False)))
    writer = TableWriter(tmp_path, "parquet", ["batches"], None,
                         dict(kind=("chunk", "final", "decode")))
    writer.write(dict(batches=batches(0)))
    message = b"".join(bytes(part) for part in frame(("write", dict(batches=batches(3)))))
    os.write(writer._fd, message[:len(message) // 2])  # then the harness dies
    writer._process.stdin.close()
    assert writer._process.wait(timeout=60) == 0
    assert writer._process.stdout.read() == b""  # no answer: nobody closed the run
    assert pd.read_parquet(tmp_path / "batches.parquet")["step"].tolist() == [0, 1, 2]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert "killed" in manifest and not manifest["complete"]


def test_a_chunk_the_table_refuses_fails_close_naming_the_table(tmp_path):
    writer = TableWriter(tmp_path, "parquet", ["batches"], None,
                         dict(kind=("chunk", "final", "decode")))
    bad = batches(0)
    del bad["seqlen_k"]
    writer.write(dict(batches=bad))
    with pytest.raises(OSError, match=r"batches: ValueError: .*lacks the declared columns "
                                      r"\['seqlen_k'\]"):
        writer.close()
    assert os.listdir(tmp_path) == []
