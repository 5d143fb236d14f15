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
