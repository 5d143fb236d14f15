"""The C++ P/D loop against the Python one: random P/D deployments (instances per pool,
routers, links slow enough to queue transfers, layerwise or not, decode pools small enough
to push back, closed loops, shared prefixes for the cache-aware router) replay the same
tables, host timings aside, of a request trace and of a session trace."""

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from harness.analysis.exact import TABLES, first_difference
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload

from .test_disaggregated import pd_workload

pytestmark = pytest.mark.core


@st.composite
def deployments(draw):
    n = draw(st.integers(1, 30))
    rows = [(round(a, 4), p, o) for a, p, o in zip(
        np.cumsum(draw(st.lists(st.floats(0, 0.02), min_size=n, max_size=n))),
        draw(st.lists(st.integers(1, 2000), min_size=n, max_size=n)),
        draw(st.lists(st.integers(1, 30), min_size=n, max_size=n)))]
    prefill = {"instances": draw(st.integers(1, 3))}
    decode = {"instances": draw(st.integers(1, 3)),
              "engine": {"num_kv_blocks": draw(st.sampled_from((200, 400, 4000)))}}
    kv = {"link": draw(st.sampled_from((0.001, 0.05, 10))), "layerwise": draw(st.booleans())}
    router = {"prefill": draw(st.sampled_from(("round_robin", "least_tokens", "cache_aware",
                                               "session_affinity"))),
              "decode": draw(st.sampled_from(("round_robin", "least_kv")))}
    extra = draw(st.sampled_from(("", "load: {mode: concurrency, concurrency: 4}\n")))
    return rows, prefill, decode, kv, router, extra


@st.composite
def session_deployments(draw):
    """deployments() replaying a session trace: each turn's parent an earlier turn or none
    (a root, starting a session at its time), a sub-agent's first turn or its parent's one
    next turn; outputs of one token among them; open, or a closed loop of live sessions."""
    rows, prefill, decode, kv, router, _ = draw(deployments())
    turns, followed = [], set()
    for i, (at, prompt, out) in enumerate(rows):
        p = draw(st.integers(-1, i - 1)) if i else -1
        kind = "user" if p < 0 else "subagent" if p in followed else \
            draw(st.sampled_from(("tool", "subagent")))
        if kind == "tool":
            followed.add(p)
        sid = turns[p]["session_id"] if p >= 0 else i
        turns.append(dict(session_id=sid, turn=sum(t["session_id"] == sid for t in turns),
                          parent=turns[p]["turn"] if p >= 0 else -1, arrival_s=at,
                          gap_s=draw(st.sampled_from((0.0, 0.001, 0.02))), gap_kind=kind,
                          input_tokens=1 + prompt // 40, max_new_tokens=out))
    extra = draw(st.sampled_from(("", "load: {mode: sessions, sessions: 2}\n")))
    return turns, prefill, decode, kv, router, extra


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(deployment=deployments())
def test_the_two_loops_replay_a_pd_deployment_alike(deployment, tmp_path_factory):
    rows, prefill, decode, kv, router, extra = deployment
    tmp = tmp_path_factory.mktemp("pd")
    both_loops_alike(tmp, pd_workload(tmp, rows, prefill, decode, kv, router, extra))


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(deployment=session_deployments())
def test_the_two_loops_replay_sessions_in_a_pd_deployment_alike(deployment, tmp_path_factory):
    turns, prefill, decode, kv, router, extra = deployment
    tmp = tmp_path_factory.mktemp("pd")
    path = pd_workload(tmp, [], prefill, decode, kv, router, extra)
    (tmp / "s.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    path.write_text(path.read_text().replace("trace: {file: trace.csv}", "trace: {file: s.jsonl}"))
    both_loops_alike(tmp, path)


def both_loops_alike(tmp, path):
    runs = {}
    for loop in ("python", "cpp"):
        (runs[loop],) = run_workload(load_workload(path, [f"replay_loop={loop}",
                                                          f"output={tmp / loop}"]))
    for table in TABLES:
        assert first_difference(runs["python"], runs["cpp"], table) is None, table
