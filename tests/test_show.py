"""steptrace show: a run's headline, the rows a run has in HEADLINE's order; a P/D run's
how the pools did (per device, the transfers, the waits for decode room, each pool's MFU
and DP tax), each value the one --json gives."""

import json

import pytest

from harness.commands import main
from harness.schema.summary import HEADLINE
from tests.helpers import modeled_runs, pd_runs

pytestmark = pytest.mark.core  # runs the engine


def shown(capsys, run):
    """{row name: (value as printed, unit)} of `show RUN`, and its --json document."""
    assert main(["show", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    rows = {}
    for line in lines:
        if line.startswith("  note:"):
            continue
        *name, value, unit = line.split()
        # the values right-aligned in one column, however long a name
        rows[" ".join(name)] = (value, unit, line.rindex(value) + len(value))
    assert main(["show", str(run), "--json"]) == 0
    return rows, json.loads(capsys.readouterr().out)


def test_a_pd_runs_headline_says_how_the_pools_did(tmp_path, capsys):
    (run,) = pd_runs(tmp_path)
    capsys.readouterr()
    rows, document = shown(capsys, run)
    summary = {f"{r['metric']} {r['stat']}": r for r in document["summary"]}
    pd_rows = ["per_device input_tokens_per_prefill_device",
               "per_device output_tokens_per_decode_device", "per_device total_tokens",
               "kv_transfer p50", "kv_transfer p99", "decode_wait p99",
               "prefill_mfu model", "decode_mfu model",
               "prefill_dp_imbalance lost_share", "decode_dp_imbalance lost_share"]
    names = list(rows)
    first = names.index("decode_stall share") + 1  # 0 on a decode instance: no prompt round
    assert names[first:first + len(pd_rows)] == pd_rows
    for name in names:  # each as --json has it
        value, unit, _ = rows[name]
        assert unit == summary[name]["unit"]
        assert float(value.replace(",", "")) == pytest.approx(summary[name]["value"],
                                                              rel=1e-3, abs=1e-12)
    # a P/D run writes no co-located engine rows: none is printed empty
    assert not {"mfu model", "dp_imbalance lost_share", "step p50"} & set(rows)
    assert len({end for _, _, end in rows.values()}) == 1


def test_a_colocated_runs_headline_has_no_pd_rows(tmp_path, capsys):
    (run,) = modeled_runs(tmp_path)
    capsys.readouterr()
    rows, _ = shown(capsys, run)
    assert list(rows) == [" ".join(k) for k in HEADLINE if " ".join(k) in rows]
    assert not any(k.startswith(("per_device", "kv_transfer", "decode_wait", "prefill_",
                                 "decode_")) for k in rows if k != "decode_stall share")
    assert "mfu model" in rows and {end for _, _, end in rows.values()} == {44}  # as before


# ---------------------------------------------------------------- a sweep's folders


def a_sweep(tmp_path, extra=()):
    """A sweep's folder holding its table (tests/test_sweep_fronts.py's eight points)."""
    from harness.record.table_sink import write_table
    from harness.sweeps.points.table import table
    from tests.test_sweep_fronts import POINTS, row

    folder = tmp_path / "my-sweep"
    folder.mkdir()
    write_table(table([row(*p) for p in POINTS] + list(extra)), folder, "sweep", "parquet")
    return folder


def test_show_prints_a_sweeps_table_as_the_sweep_printed_it(tmp_path, capsys):
    from harness.commands.sweep import print_text
    from tests.test_sweep_fronts import H200, row

    failed = row(H200, 8, 500, 9000, 400, status="failed", reason="RuntimeError: boom")
    folder = a_sweep(tmp_path, [failed])
    assert main(["show", str(folder), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["name"], document["mode"], document["front_by"]) == \
        ("my-sweep", "run", "device")
    assert (document["points"], document["done"], document["failed"]) == (9, 8, 1)
    assert document["table"] == str(folder / "sweep.parquet")
    assert main(["show", str(folder)]) == 0
    out = capsys.readouterr().out
    print_text(document)  # what `steptrace sweep` prints of the same document
    assert out == capsys.readouterr().out
    assert out.startswith("steptrace sweep: my-sweep (run mode): Pareto fronts by device")
    assert out.splitlines()[-1] == "9 points: 8 with an answer, 1 failed"
    assert "RuntimeError: boom" in out


def test_a_sweep_folder_whose_table_is_not_one_is_bad_input(tmp_path, capsys):
    folder = tmp_path / "sw"
    folder.mkdir()
    (folder / "sweep.parquet").write_text("not parquet")
    assert main(["show", str(folder)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"{folder / 'sweep.parquet'}: unreadable" in err[0]


def tampered(tmp_path, column, values):
    """A sweep's folder whose table's `column` holds `values` (one per point, or one for all)
    instead of what the sweep wrote."""
    import pandas as pd

    folder = a_sweep(tmp_path)
    path = folder / "sweep.parquet"
    table = pd.read_parquet(path)
    table[column] = values if isinstance(values, list) else [values] * len(table)
    table.to_parquet(path)
    return folder


# a column of another kind than docs/tables.md declares, and what the one line says of it
TAMPERED = [
    ("status", None, "column status, row 1: expected done, failed or refused, got no value "
                     "(null)"),
    ("status", "finished", "column status, row 1: expected done, failed or refused, got "
                           "'finished'"),
    ("concurrency", [None, 1.5] + [None] * 6, "column concurrency, row 2: expected an "
                                              "integer, got 1.5"),
    ("point", list(range(8)), "column point, row 1: expected text, got 0"),
    ("skipped", [False, None] * 4, "column skipped, row 2: expected true or false, got no "
                                   "value (null)"),
    ("tokens_per_s_per_user", "fast", "column tokens_per_s_per_user, row 1: expected a "
                                      "number, got 'fast'"),
]


@pytest.mark.parametrize("column, values, words", TAMPERED)
def test_a_sweep_table_holding_another_kind_than_declared_is_bad_input(
        tmp_path, capsys, column, values, words):
    from tests.test_bad_input_cli import steptrace

    folder = tampered(tmp_path, column, values)
    steptrace(capsys, ["show", folder], 2, f"{folder / 'sweep.parquet'}: {words}",
              root=tmp_path)
    assert main(["show", str(folder), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["exit_code"] == 2


def test_a_sweep_table_that_is_a_fifo_is_named_not_opened(tmp_path, capsys):
    import os

    from tests.test_bad_input_cli import steptrace

    folder = tmp_path / "sw"
    folder.mkdir()
    os.mkfifo(folder / "sweep.parquet")
    steptrace(capsys, ["show", folder], 2,
              f"{folder / 'sweep.parquet'}: is a FIFO (named pipe), not a regular file",
              root=tmp_path)


def test_a_folder_that_is_none_of_these_names_what_was_expected(tmp_path, capsys):
    assert main(["show", str(tmp_path)]) == 2
    (err,) = capsys.readouterr().err.splitlines()
    assert f"{tmp_path}: not a run directory (no manifest.json)" in err
    assert "capacity.json" in err and "sweep.parquet" in err


def test_a_searchs_folder_holds_its_answer_for_show(tmp_path, capsys):
    """find() writes the answer beside its table, so a sweep's point's search (which the
    command does not write) reads back as the command printed it."""
    from harness.commands import capacity as command
    from harness.commands.common import json_text
    from harness.sweeps.capacity import Options, find
    from harness.workload import load_workload
    from tests.test_sweep_points import TINY

    (tmp_path / "w.yaml").write_text(TINY + f"slo: {{ttft: 0.002}}\noutput: {tmp_path}\n")
    found = find(load_workload(tmp_path / "w.yaml"), (),
                 Options(max_probes=3, length_check=False))
    assert main(["show", str(found.folder), "--json"]) == 0
    assert capsys.readouterr().out == json_text(found.document) + "\n"
    assert main(["show", str(found.folder)]) == 0
    out = capsys.readouterr().out
    command.print_text(found.document)
    assert out == capsys.readouterr().out and out.startswith("steptrace capacity: w on B200")


@pytest.mark.slow
def test_show_reads_a_capacity_sweeps_point_folder(tmp_path, capsys):
    from harness.record.table_sink import write_table
    from harness.sweeps.points.execute import execute, plan
    from harness.sweeps.points.table import table
    from tests.test_sweep_points import TINY, sweep_file
    from tests.test_sweep_run import InProcess

    # 400 requests: the run at the answer reaches a steady state (the length check asks)
    base = TINY.replace("requests: 12", "requests: 400") + "slo: {ttft: 0.002}\n"
    path = sweep_file(tmp_path, "base: base.yaml\nmode: capacity\naxes: {device: "
                                "[modeled:B200]}\n", base)
    the_plan = plan(path, (f"output={tmp_path / 'out'}",))
    (point,) = execute(the_plan, InProcess())
    write_table(table([point]), the_plan.folder, "sweep", "parquet")
    (search,) = (the_plan.folder / "points").glob("*/base/capacity/*")
    assert main(["show", str(search), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["outcome"] == point["outcome"] and document["folder"] == str(search)
    assert main(["show", str(the_plan.folder)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("steptrace sweep: s (capacity mode): Pareto fronts by device\n")
    assert out.endswith("1 point: 1 with an answer (1 a lower bound)\n")
