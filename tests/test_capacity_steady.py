"""steptrace capacity's length check asks whether the run at the answer reached its steady
state (docs/capacity.md, "Trace length"): where its running sequences are still rising at
the last arrival, the answer is refused as trace_too_short though a trace twice as long
meets the target; a workload whose running sequences plateau early still passes."""

import json

import pytest

from harness.analysis.steady_state import of_run
from harness.commands import main
from harness.record.run import Run
from tests.helpers import MODELED

# 100 requests at 10 req/s on the 8-H200 node, room for every one of them in the batch and
# the KV pool: a request decoding 1,000 tokens runs for about 27 s, so the running sequences
# still rise when the last one arrives at 10 s; one decoding 16 tokens leaves within half a
# second, and they plateau at once. The rate is the highest probed: one probe and the
# doubled trace's.
LOAD = ["--set", "trace.generate.requests=100", "--set", "trace.generate.rate=10",
        "--highest", "10", "--set", "trace.generate.prompt={fixed: 256}",
        "--set", "engine.num_kv_blocks=20000", "--set", "engine.max_num_seqs=256"]
SLO = "slo: {ttft: 2, tpot: 0.1}\n"


def search(tmp_path, capsys, output, status, *argv):
    path = tmp_path / "w.yaml"
    path.write_text(MODELED + f"output: {tmp_path / 'results'}\nname: steady\n" + SLO)
    args = ["capacity", str(path), *LOAD, "--set", f"trace.generate.output={{fixed: {output}}}",
            *argv]
    assert main(args) == status, capsys.readouterr().err
    return capsys.readouterr().out


@pytest.mark.slow  # two capacity searches of 1,000-token decodes
def test_an_answer_whose_run_is_still_filling_is_refused_though_the_doubled_trace_agrees(
        tmp_path, capsys):
    out = json.loads(search(tmp_path, capsys, 1000, 1, "--json"))
    assert out["outcome"] == "trace_too_short" and out["requests"] == 100
    # both probes meet the target: the doubled trace agrees with the answer
    assert [(p["requests"], p["met"], p["length_check"]) for p in out["probes"]] == [
        (100, True, False), (200, True, True)]
    check, steady = out["length_check"], out["length_check"]["steady_state"]
    assert check["status"] == "failed" and check["setting"] == "trace.generate.requests=200"
    assert not steady["found"] and steady["start_s"] is None and steady["end_s"] is None
    assert steady["reason"].startswith("still filling at the last arrival")
    assert steady["reason"] == of_run(Run.read(out["capacity"]["run_dir"])).reason
    assert check["reason"] == f"the run at the answer reached no steady state: {steady['reason']}"
    text = search(tmp_path, capsys, 1000, 1)
    assert ("no capacity: the answer depends on the trace's length: 10 req/s met the target on "
            "100 requests (attainment 100.0%), but that run reached no steady state: still "
            "filling at the last arrival") in text
    assert "on 200 requests 9.524 req/s, the answer less its resolution, meets it" in text
    assert ("lengthen the trace (--set trace.generate.requests=200, twice the requests, or "
            "more)") in text


def test_an_answer_whose_run_plateaus_passes_with_its_window(tmp_path, capsys):
    out = json.loads(search(tmp_path, capsys, 16, 0, "--json"))
    assert out["outcome"] == "at_least"
    check, steady = out["length_check"], out["length_check"]["steady_state"]
    window = of_run(Run.read(out["capacity"]["run_dir"]))
    assert check["status"] == "passed" and check["reason"] is None
    assert steady == dict(found=True, reason=None, start_s=window.start_s, end_s=window.end_s)
    assert 0 < steady["start_s"] < steady["end_s"]  # from its fill to the last arrival
    text = search(tmp_path, capsys, 16, 0)
    assert (f"the answer does not depend on the trace's length; the run at the answer reached "
            f"its steady state from {window.start_s:.4g} s to the last arrival "
            f"({window.end_s:.4g} s)") in text


def test_without_the_length_check_no_steady_state_is_asked(tmp_path, capsys):
    out = json.loads(search(tmp_path, capsys, 1000, 0, "--no-length-check", "--json"))
    assert out["outcome"] == "at_least" and len(out["probes"]) == 1
    assert out["length_check"]["status"] == "off"
    assert out["length_check"]["steady_state"] is None
