"""A P/D pool's engine keys by path, as docs/workloads.md says pools take engine keys:
`--set deployment.decode.engine.max_num_seqs=4` and the same key as a sweep's axis, each
checked by key as under `engine:`, over the workload's engine for that pool alone."""

import pytest

from harness.sweeps.points.execute import plan
from harness.sweeps.points.sweep_file import not_a_key
from harness.workload import WorkloadError, load_workload
from tests.test_disaggregated import pd_workload

ROWS = [(0.0, 40, 4), (0.01, 60, 4)]
KEY = "deployment.decode.engine.max_num_seqs"


def engines(workload):
    service = workload.disaggregation
    return {pool.role: pool.engine for pool in service.pools}


def test_a_pools_engine_key_is_set_by_path(tmp_path):
    path = pd_workload(tmp_path, ROWS)
    path.write_text(path.read_text().replace("engine: {", "engine: {max_num_seqs: 16, "))
    by_path = engines(load_workload(path, (f"{KEY}=4",)))
    whole = engines(load_workload(path, ("deployment.decode.engine={max_num_seqs: 4}",)))
    assert by_path == whole
    assert by_path["decode"]["max_num_seqs"] == 4
    assert by_path["prefill"]["max_num_seqs"] == 16  # the workload's: the other pool's own
    assert by_path["decode"]["max_num_batched_tokens"] == 4096


@pytest.mark.parametrize("item, words", [
    (f"{KEY}=0", f"--set '{KEY}=0': {KEY}: expected an integer >= 1, got 0"),
    ("deployment.decode.engine.engine_type=prompt",
     "deployment.decode.engine.engine_type: expected it left out: the pool sets engine_type"),
    ("deployment.prefill.engine.bogus=1",
     "deployment.prefill.engine.bogus: unknown key; expected one of"),
])
def test_a_bad_pool_engine_key_is_named_by_key(tmp_path, item, words):
    with pytest.raises(WorkloadError) as e:
        load_workload(pd_workload(tmp_path, ROWS), (item,))
    assert words in str(e.value)


def test_a_pools_engine_key_is_a_sweep_axis(tmp_path):
    assert not_a_key(KEY) == ""
    pd_workload(tmp_path, ROWS)
    (tmp_path / "s.yaml").write_text(f"base: pd.yaml\naxes: {{{KEY}: [2, 8]}}\n")
    the_plan = plan(tmp_path / "s.yaml", ())
    assert not the_plan.refused
    points = sorted(the_plan.unique, key=lambda p: p.axes[KEY])
    assert [p.axes[KEY] for p in points] == [2, 8]
    assert [engines(load_workload(p.workload, p.overrides))["decode"]["max_num_seqs"]
            for p in points] == [2, 8]
