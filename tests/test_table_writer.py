"""The table writer's process: what crosses the pipe arrives whole, a pipe that ends early
(the harness killed mid-message) leaves whole tables of every message received, and a
message that is not one (garbage, a pickle, a column of no known type) is refused without
running anything."""

import json
import os
import pickle
import re
import struct
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from harness.io import child_process
from harness.record import table_writer
from harness.record.table_writer import NotStarted, TableWriter, encoded, frame
from harness.schema import TABLES
from tests.helpers import in_subprocess, process_gone

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

KINDS = dict(kind=("chunk", "final", "decode"), role=("colocated", "prefill", "decode"))


def batches(first_step: int, n: int = 3) -> dict:
    return dict(role=np.zeros(n, np.int8), instance=np.zeros(n, np.int32),
                step=np.arange(first_step, first_step + n, dtype=np.int64),
                dp_rank=np.zeros(n, np.int32), seq_id=np.arange(n, dtype=np.int64),
                kind=np.array([0, 1, 2][:n], np.int8), seqlen_q=np.ones(n, np.int32),
                seqlen_k=np.full(n, 7, np.int32))


def every_column(table: str, n: int) -> dict:
    """Every declared column of a table, in the dtypes the recorder hands over: numbers of
    each width, booleans (a view of the C++ bytes), NaN, dictionary codes, text as an
    object array and as a list (None among it)."""
    columns = {c.name: np.arange(n).astype(c.type.to_pandas_dtype())
               for c in TABLES[table].columns
               if c.name not in ("phase", "status", "reason", "role")}
    if table == "steps":
        columns.update(role=np.arange(n, dtype=np.int8) % 3, phase=np.arange(n, dtype=np.int8) % 2,
                       empty=(np.arange(n, dtype=np.uint8) % 2).view(np.bool_))
    else:
        columns.update(ttft_s=np.full(n, np.nan), status=np.array(["finished"] * n, object),
                       reason=["", "préempté ✓", None, "x"][:n])
    return columns


def test_columns_cross_whole_with_their_dictionaries_and_labels(tmp_path):
    writer = TableWriter(tmp_path, "parquet", ["steps", "batches", "requests"],
                         dict(run_id="r", overlap=True), dict(KINDS, phase=("decode", "prompt")))
    sent = dict(steps=every_column("steps", 4), requests=every_column("requests", 4))
    writer.write(dict(sent, batches=batches(0)))
    writer.write(dict(batches=batches(3)))
    writer.close()
    table = pd.read_parquet(tmp_path / "batches.parquet")
    assert table["step"].tolist() == list(range(6))
    assert table["kind"].tolist() == ["chunk", "final", "decode"] * 2
    assert set(table.columns) == set(TABLES["batches"].names) | {"run_id", "overlap"}
    assert table["run_id"].tolist() == ["r"] * 6 and table["overlap"].all()
    for name in ("steps", "requests"):
        rows = pd.read_parquet(tmp_path / f"{name}.parquet")
        for column, values in sent[name].items():
            if column == "phase":
                assert rows[column].tolist() == ["decode", "prompt"] * 2
            elif column == "role":
                assert rows[column].tolist() == ["colocated", "prefill", "decode", "colocated"]
            else:
                pd.testing.assert_series_equal(rows[column], pd.Series(values, name=column))
    assert sorted(os.listdir(tmp_path)) == ["batches.parquet", "requests.parquet",
                                           "steps.parquet"]


def test_a_pipe_cut_mid_message_keeps_every_whole_message(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(dict(complete=False)))
    writer = TableWriter(tmp_path, "parquet", ["batches"], None, KINDS)
    writer.write(dict(batches=batches(0)))
    columns, payloads = encoded(dict(batches=batches(3)))
    message = b"".join(bytes(part) for part in frame(dict(kind="write", columns=columns),
                                                     payloads))
    popen = writer._process.popen
    os.write(popen.stdin.fileno(), message[:len(message) // 2])  # then the harness dies
    popen.stdin.close()
    assert popen.wait(timeout=60) == 0
    assert popen.stdout.read() == b""  # no answer: nobody closed the run
    assert pd.read_parquet(tmp_path / "batches.parquet")["step"].tolist() == [0, 1, 2]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert "killed" in manifest and not manifest["complete"]


def test_a_harness_killed_before_the_writer_warmed_up_is_marked_killed(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(dict(complete=False)))
    process = table_writer._WriterProcess()
    process.popen.stdout.close()  # the harness dies before the writer answers `ready`
    process.open(dict(kind="open", run_dir=str(tmp_path), format="parquet", labels={},
                      names=["batches"], dictionaries=KINDS))
    process.popen.stdin.close()
    assert process.popen.wait(timeout=60) == 0
    assert os.listdir(tmp_path) == ["manifest.json"]  # no chunk came: no table
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert "killed" in manifest and not manifest["complete"]


def test_a_chunk_the_table_refuses_fails_close_naming_the_table(tmp_path):
    writer = TableWriter(tmp_path, "parquet", ["batches"], None, KINDS)
    bad = batches(0)
    del bad["seqlen_k"]
    writer.write(dict(batches=bad))
    with pytest.raises(OSError, match=r"batches: ValueError: .*lacks the declared columns "
                                      r"\['seqlen_k'\]"):
        writer.close()
    assert os.listdir(tmp_path) == []


# --- what another process may write into the writer's stdin ---------------------------

class Marker:
    """Unpickled, it creates the file at `path`."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def head(fields: dict) -> bytes:
    text = json.dumps(fields).encode()
    return struct.pack("<Q", len(text)) + text


def message(fields: dict, *payloads: bytes) -> bytes:
    return head({**fields, "sizes": [len(p) for p in payloads]}) + b"".join(payloads)


def chunk(**types) -> bytes:
    """A batches chunk whose columns are batches(3)'s but for those given as (type, payload)."""
    columns, payloads = encoded(dict(batches=batches(3)))
    for i, (name, _) in enumerate(columns["batches"]):
        if name in types:
            columns["batches"][i][1], payloads[i] = types[name]
    return message(dict(kind="write", columns=columns), *(bytes(p) for p in payloads))


def pickle_framed_as_before(marker) -> bytes:
    """The wire format of old: a pickle's length, its buffer count, the pickle."""
    p = pickle.dumps(("write", Marker(marker)), protocol=5)
    return struct.pack("<QI", len(p), 0) + p


WRITE = dict(kind="write", columns=dict(batches=[["step", "<i8"]]))
HOSTILE = {
    "a pickle as the pipe once carried it": pickle_framed_as_before,
    "a pickle as a text column": lambda marker: chunk(
        seq_id=("text", pickle.dumps(Marker(marker)))),
    "a pickle as a column of objects": lambda marker: chunk(
        seq_id=("|O", pickle.dumps(Marker(marker)))),
    "a pickle as the head": lambda marker: struct.pack("<Q", len(p := pickle.dumps(
        Marker(marker)))) + p,
    "text that is not a list of strings": lambda marker: chunk(
        seq_id=("text", json.dumps([{"__reduce__": str(marker)}]).encode())),
    "bytes that do not fit their type": lambda marker: chunk(seq_id=("<i8", b"\0" * 7)),
    "garbage": lambda marker: bytes(range(256)) * 8,
    "a head that is not JSON": lambda marker: struct.pack("<Q", 5) + b"\x80nope",
    "a kind the writer does not know": lambda marker: message(dict(kind="exec")),
    "a second open": lambda marker: message(dict(kind="open", run_dir=str(marker.parent),
                                                 format="csv", labels={}, names=[],
                                                 dictionaries={})),
    "a table never opened": lambda marker: message(
        dict(kind="write", columns=dict(steps=[["step", "<i8"]])), b"\0" * 8),
    "a column twice": lambda marker: message(
        dict(WRITE, columns=dict(batches=[["step", "<i8"]] * 2)), b"\0" * 8, b"\0" * 8),
    "more columns than payloads": lambda marker: message(WRITE),
    "a payload longer than memory": lambda marker: head(dict(WRITE, sizes=[1 << 62])),
    "a head longer than any": lambda marker: struct.pack("<Q", 1 << 40) + b"{}",
}


@pytest.mark.slow  # a writer process of its own each, killed by what it is sent
@pytest.mark.parametrize("hostile", list(HOSTILE))
def test_a_message_that_is_not_one_is_refused_and_runs_nothing(tmp_path, hostile):
    out, marker = tmp_path / "run", tmp_path / "ran"
    out.mkdir()
    writer = TableWriter(out, "parquet", ["batches"], None, KINDS)
    writer.write(dict(batches=batches(0)))
    with open(f"/proc/{writer._process.pid}/fd/0", "wb") as stdin:  # another process's way in
        stdin.write(HOSTILE[hostile](marker))
    assert writer._process.popen.wait(timeout=60) == 0  # refused: it stops reading
    with pytest.raises(OSError, match=r"^table writer: Refused: "):
        writer.close()
    assert not marker.exists()
    assert pd.read_parquet(out / "batches.parquet")["step"].tolist() == [0, 1, 2]  # whole
    assert os.listdir(out) == ["batches.parquet"]


@pytest.mark.parametrize("first", ["pickle", "write"])
def test_a_first_message_that_does_not_open_starts_nothing(tmp_path, first):
    marker = tmp_path / "ran"
    sent = pickle_framed_as_before(marker) if first == "pickle" else chunk()
    done = subprocess.run(child_process.command("harness.record.table_writer"), input=sent,
                          capture_output=True, timeout=60)
    assert done.returncode == 2  # no `ready`: the harness stops there, saying why
    assert done.stdout.startswith(b"not started: Refused: ")
    assert done.stdout.count(b"\n") == 1 and done.stderr == b""  # one line, no traceback
    assert not marker.exists() and os.listdir(tmp_path) == []


def test_a_writer_that_does_not_start_says_why_at_the_first_write_and_at_close(tmp_path):
    """Opening does not wait for the writer; the first write does, and raises the writer's
    own reason (a format it cannot write), again at close: no table was begun."""
    writer = TableWriter(tmp_path, "xlsx", ["batches"], None, KINDS)
    why = ("the table writer process did not start: not started: ValueError: table format "
           "must be one of parquet, csv, got 'xlsx'")
    with pytest.raises(NotStarted, match=f"^{re.escape(why)}$"):
        writer.write(dict(batches=batches(0)))
    with pytest.raises(NotStarted, match=f"^{re.escape(why)}$"):
        writer.close()
    assert writer._process.popen.poll() == 2 and os.listdir(tmp_path) == []


def test_a_writer_that_dies_unheard_is_not_started_with_its_status(tmp_path, monkeypatch):
    monkeypatch.setattr(table_writer.child_process, "command",
                        lambda module: [sys.executable, "-c", "raise SystemExit(3)"])
    monkeypatch.setattr(table_writer, "_idle_writer", lambda: None)
    writer = TableWriter(tmp_path, "parquet", ["batches"], None, KINDS)
    with pytest.raises(NotStarted, match="did not start: it exited with status 3$"):
        writer.ready()
    with pytest.raises(NotStarted, match="status 3"):
        writer.close()


def test_an_idle_writer_is_not_waited_for_at_exit():
    """At exit an idle writer's pipe is closed and the harness goes: the writer, with
    nothing open, ends on its own."""
    code = """
        import time
        from harness.record import table_writer
        table_writer.start_early()
        (process,) = table_writer._idle
        start = time.perf_counter()
        table_writer._end_idle()
        print(process.pid, process.popen.returncode, time.perf_counter() - start, flush=True)
    """
    pid, status, took = in_subprocess(code).split()[-3:]
    assert status == "None" and float(took) < 0.05  # not waited for
    assert process_gone(int(pid), within_s=30)


# --- one writer process, runs in turn -----------------------------------------------------

def test_runs_in_turn_share_one_writer_process(tmp_path, monkeypatch):
    """A writer that closed its run cleanly serves the next (no process start, no pyarrow
    warm-up); a relative run folder is the harness's, wherever the writer started."""
    pids = []
    for n, where in enumerate(("a", "b", "c")):
        (tmp_path / where).mkdir()
        monkeypatch.chdir(tmp_path / where)
        writer = TableWriter("run", "parquet", ["batches"], dict(run_id=where), KINDS)
        pids.append(writer._process.pid)
        (tmp_path / where / "run").mkdir()
        writer.write(dict(batches=batches(0, n + 1)))
        writer.close()
    assert len(set(pids)) == 1
    for n, where in enumerate(("a", "b", "c")):
        table = pd.read_parquet(tmp_path / where / "run" / "batches.parquet")
        assert table["step"].tolist() == list(range(n + 1))
        assert table["run_id"].tolist() == [where] * (n + 1)


def test_a_writer_whose_run_failed_serves_no_other(tmp_path):
    writer = TableWriter(tmp_path / "a", "parquet", ["batches"], None, KINDS)
    (tmp_path / "a").mkdir()
    bad = batches(0)
    del bad["seqlen_k"]
    writer.write(dict(batches=bad))
    with pytest.raises(OSError, match="lacks the declared columns"):
        writer.close()
    assert writer._process.popen.poll() is not None  # ended, not kept
    (tmp_path / "b").mkdir()
    again = TableWriter(tmp_path / "b", "parquet", ["batches"], None, KINDS)
    assert again._process.pid != writer._process.pid
    again.write(dict(batches=batches(0)))
    again.close()
    assert len(pd.read_parquet(tmp_path / "b" / "batches.parquet")) == 3


def test_an_idle_writer_ends_with_the_harness(tmp_path):
    code = f"""
        from pathlib import Path
        from harness.record.table_writer import TableWriter
        writer = TableWriter(Path({str(tmp_path)!r}), "parquet", ["batches"])
        writer.close()
        print(writer._process.pid, flush=True)
    """
    pid = int(in_subprocess(code).split()[-1])
    assert process_gone(pid, within_s=30), "an idle table writer outlived the harness"


def test_the_children_do_not_carry_ld_preload(tmp_path, monkeypatch):
    """LD_PRELOAD (the sanitizer build's ASan runtime) is for the C++ core; the writer and
    the telemetry child never load it."""
    monkeypatch.setenv("LD_PRELOAD", "")
    assert "LD_PRELOAD" not in child_process.environment()
    writer = TableWriter(tmp_path, "parquet", ["batches"], None, KINDS)
    environ = open(f"/proc/{writer._process.pid}/environ", "rb").read().split(b"\0")
    writer.close()
    assert not [v for v in environ if v.startswith(b"LD_PRELOAD=")]
