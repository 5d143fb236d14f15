"""trace.generate.shared_prefix (docs/workloads.md): groups of requests sharing a prefix,
named by hash ids of the engine's blocks, and the cache hits they give."""

import pandas as pd
import pytest

from harness.sweeps.sweep import run_workload
from harness.traces.generate import fixed, generate
from harness.traces.shared_prefix import OWN, shared_prefix
from harness.workload import WorkloadError, load_workload
from tests.helpers import MODELED


def test_a_group_shares_its_full_prefix_blocks_and_nothing_else():
    df = shared_prefix(generate(40, 10.0, prompt=fixed(100), output=fixed(4)), groups=3,
                       tokens=70, block_size=16, seed=0)
    assert (df["prompt_len"] == 170).all() and df.attrs["hash_block_size"] == 16
    ids = df["hash_ids"].tolist()
    assert all(len(i) == 11 for i in ids)  # ceil(170 / 16)
    prefixes = {tuple(i[:4]) for i in ids}  # 70 // 16 = 4 full prefix blocks
    assert len(prefixes) == 3  # one per group (40 requests: every group drawn)
    own = [x for i in ids for x in i[4:]]
    assert len(own) == len(set(own)) == 40 * 7 and min(own) == OWN


@pytest.mark.core
def test_the_groups_prefixes_are_cache_hits(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path}\ntrace:\n  generate: {{requests: 24, rate: 2, "
                    "prompt: {fixed: 64}, output: {fixed: 4}, shared_prefix: {groups: 2, "
                    "tokens: 1024}}\n" + MODELED.split("\n", 2)[2])
    (run,) = run_workload(load_workload(path))
    run_dir = run.path
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert (requests["prompt_len"] == 1088).all()
    # each group's first request computes its prefix; the others hit it whole (1,024
    # tokens: 16 blocks of 64)
    assert sorted(requests["prefix_hit_tokens"].tolist()) == [0, 0] + [1024] * 22


def test_a_bad_shared_prefix_is_refused_by_key(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("trace:\n  generate: {shared_prefix: {groups: 0}}\n")
    with pytest.raises(WorkloadError, match=r"w.yaml:2: trace.generate.shared_prefix.groups: "
                                            r"expected an integer in 1 \.\. 1073741824 or "
                                            r"null, got 0"):
        load_workload(path)
