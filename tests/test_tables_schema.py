"""The result tables hold to their one declaration (harness/schema): the written files,
the recorder's C++ columns, the Python column lists, and docs/tables.md."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from engine import _core, plan
from harness.record import metrics
from harness.record.table_sink import ROW_GROUP_ROWS, TableSink, write_table
from harness.schema import LABELS, SWEEP_TABLES, TABLES, arrow_schema, values
from harness.schema.column import CODES, Column
from harness.schema.doc import markdown
from harness.sweeps.sweep import run_workload
from harness.telemetry import columns as device_columns
from harness.workload import load_workload

pytestmark = pytest.mark.core

REPO = Path(__file__).resolve().parents[1]
TINY = """trace:
  generate: {requests: 12, rate: 200, prompt: {uniform: [4, 40]}, output: {uniform: [1, 8]}}
engine: {max_num_batched_tokens: 256, num_kv_blocks: 256}
model: tiny
device: modeled:B200
clock: virtual
calibration_requests: 0
"""
# What the recorder makes of the C++ step columns before they reach the sink.
FROM_CPP = {"prompt_phase": "phase"}
ADDED_IN_PYTHON = {"role", "instance"}  # steps and batches columns the recorder adds
USED_IN_PYTHON = {"first_scheduled_step"}  # a C++ requests column the recorder turns into warm-up


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_run_writes_every_table_in_its_declared_schema(tmp_path, fmt):
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\ntable_format: {fmt}\n{TINY}")
    (run,) = run_workload(load_workload(path))
    run_dir = run.path
    # tokens: written with `tokens: true` on a torch device (tests/test_tokens.py);
    # sessions: for a session trace (tests/test_sessions_workload.py); server: against an
    # endpoint (tests/test_server_table.py)
    for name in set(TABLES) - set(SWEEP_TABLES) - {"tokens", "sessions", "server"}:
        want = arrow_schema(name, LABELS)
        if fmt == "parquet":
            got = pq.read_schema(run_dir / f"{name}.parquet").remove_metadata()
            assert got == want, f"{name}.parquet:\n{got}\ndeclared:\n{want}"
        else:
            header = (run_dir / f"{name}.csv").read_text().splitlines()[0]
            assert header.replace('"', "").split(",") == want.names, name


def test_a_readers_keys_carry_row_group_statistics(tmp_path):
    """step, seq_id and the clock's times can prune row groups; a measured value has none."""
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{TINY}")
    (run,) = run_workload(load_workload(path))
    run_dir = run.path
    for table, key, value in (("steps", "step", "forward_ns"), ("batches", "seq_id", "seqlen_k"),
                              ("requests", "arrival_s", "ttft_s")):
        group = pq.ParquetFile(run_dir / f"{table}.parquet").metadata.row_group(0)
        names = [group.column(i).path_in_schema for i in range(group.num_columns)]
        assert group.column(names.index(key)).statistics.has_min_max, (table, key)
        assert group.column(names.index(value)).statistics is None, (table, value)


def test_the_recorders_cpp_columns_are_the_declared_ones():
    """csrc/recorder/columns.hpp declares the C++ side once, in the schema's order: the
    steps and batches tables column for column, the requests table's columns the recorder
    takes from C++ (the rest are the trace's and the metrics', added in Python)."""
    cpp = _core.StepLog.columns()
    steps = [FROM_CPP.get(c, c) for c in cpp["steps"]]
    assert steps == [c for c in TABLES["steps"].names if c not in ADDED_IN_PYTHON]
    assert cpp["batches"] == [c for c in TABLES["batches"].names if c not in ADDED_IN_PYTHON]
    requests = [c for c in cpp["requests"] if c not in USED_IN_PYTHON]
    assert requests == [c for c in TABLES["requests"].names if c in requests]
    assert set(requests) <= set(TABLES["requests"].names)


def test_python_column_lists_are_the_declared_ones():
    assert device_columns.DEVICE_COLUMNS == TABLES["device"].names  # the sampler's child's copy
    assert metrics.SUMMARY_COLUMNS == TABLES["summary"].names
    assert set(metrics.REQUEST_COLUMNS) <= set(TABLES["requests"].names)


def test_the_coded_columns_are_the_engines_codes():
    """The steps table's phase by the plan's prompt flag, the batches table's kind by its
    KIND_*; engine/plan.py keeps its own copy."""
    assert values.PHASES == plan.PHASES and values.PHASES[True] == "prompt"
    assert values.KIND_NAMES == plan.KIND_NAMES
    assert [values.KIND_NAMES[k] for k in (plan.KIND_CHUNK, plan.KIND_FINAL, plan.KIND_DECODE)] \
        == ["chunk", "final", "decode"]
    assert TABLES["requests"].column("status").names_by_code() == \
        ("finished", "rejected", "unfinished", "handed_off")
    twice = Column("status", CODES, "", "", values=((0, "finished"), (0, "handed_off")))
    with pytest.raises(ValueError, match="status: codes .* one name each"):
        twice.names_by_code()


def test_docs_tables_md_is_the_declaration_rendered():
    assert (REPO / "docs" / "tables.md").read_text() == markdown(), \
        "docs/tables.md is stale: python -m harness.schema > docs/tables.md"


def test_every_link_to_a_definition_names_a_section_that_exists():
    for table in list(TABLES.values()) + [None]:
        columns = table.columns if table else LABELS.values()
        for c in columns:
            if not c.defined:
                continue
            page, anchor = c.defined.split("#")
            headings = re.findall(r"^#+ (.+)$", (REPO / "docs" / page).read_text(), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{c.name}: {c.defined}"


def _slug(heading):  # GitHub's anchor of a markdown heading
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_a_chunk_must_carry_exactly_the_declared_columns(tmp_path):
    sink = TableSink(tmp_path, "summary", "parquet")
    with pytest.raises(ValueError, match=r"summary.parquet: the chunk lacks the declared "
                                         r"columns \['unit'\] and carries the undeclared "
                                         r"\['units'\]"):
        sink.write(pd.DataFrame(dict(metric=["m"], stat=["s"], value=[1.0], units=["s"])))
    with pytest.raises(KeyError, match="no declared table 'step'"):
        TableSink(tmp_path, "step", "parquet")


def test_chunks_reach_disk_a_row_group_at_a_time(tmp_path):
    """Chunks are gathered into row groups of ROW_GROUP_ROWS, each written when full: the
    table never waits in memory whole, and close() writes the rest."""
    chunk = pd.DataFrame(dict(metric=["m"] * 10_000, stat="s", value=1.0, unit="s"))
    sink = TableSink(tmp_path, "summary", "parquet")
    for _ in range(15):
        sink.write(chunk)
    sink.close()
    groups = pq.ParquetFile(tmp_path / "summary.parquet").metadata
    sizes = [groups.row_group(i).num_rows for i in range(groups.num_row_groups)]
    assert sizes == [70_000, 70_000, 10_000] and ROW_GROUP_ROWS == 65_536


def test_every_chunk_is_cast_to_the_declared_types(tmp_path):
    empty = pd.DataFrame({name: [] for name in TABLES["device"].names})  # object columns
    write_table(empty, tmp_path, "device", "parquet", dict(run_id="r"))
    assert pq.read_schema(tmp_path / "device.parquet").remove_metadata() == \
        arrow_schema("device", ["run_id"])
    summary = pd.DataFrame(dict(unit=["s"], value=np.array([3], np.int64), stat="p50",
                                metric="ttft"))  # any order, an integer value
    write_table(summary, tmp_path, "summary", "csv")
    assert (tmp_path / "summary.csv").read_text().splitlines() == \
        ['"metric","stat","value","unit"', '"ttft","p50",3,"s"']
