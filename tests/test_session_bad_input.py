"""A bad session trace is refused before anything runs (docs/workloads.md, "Sessions"): by
`steptrace validate` and `steptrace run`, exit 2, the message naming the file, the line and
the session, nothing written under `output`. A fan-out larger than the engine holds at once
queues, and runs."""

import json

import pandas as pd
import pytest

from harness.commands import main
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload
from tests.helpers import MODELED
from tests.test_sessions import turn

pytestmark = pytest.mark.core

# a DP rank holds 64 blocks of 16 tokens: 1,024 tokens, a turn's prompt and output (its
# lookahead is 1)
ENGINE = MODELED.split("\n", 2)[2].replace(
    "num_kv_blocks: 256", "num_kv_blocks: 64, block_size: 16, max_num_seqs: 2")


def workload(tmp_path, rows, extra=""):
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'r'}\ntrace: {{file: s.jsonl}}\n{ENGINE}{extra}")
    return path


def ids(n):
    return list(range(n))


BAD = {
    "a parent missing": ([turn(3, 0, -1), turn(3, 1, 5)],
                         ":2: session 3: turn 1's parent, turn 5, is missing"),
    "a parent later": ([turn(3, 0, -1), turn(3, 1, 2), turn(3, 2, 0)],
                       ":2: session 3: turn 1's parent, turn 2, comes later"),
    "a cycle": ([turn(3, 0, -1), turn(3, 2, 1), turn(3, 1, 2)],
                ":2: session 3: turn 2's parent, turn 1, comes later"),
    "its own parent": ([turn(3, 0, -1), turn(3, 1, 1)],
                       ":2: session 3: turn 1 is its own parent: a cycle"),
    "a turn twice": ([turn(3, 0, -1), turn(3, 0, -1)], ":2: session 3: turn 0 given twice"),
    "a second root": ([turn(3, 0, -1), turn(3, 1, -1)], ":2: session 3: a second root"),
    "two next turns": ([turn(3, 0, -1), turn(3, 1, 0), turn(3, 2, 0)],
                       ":3: session 3: turn 0 has two next turns"),
    "hash ids on some turns": ([turn(3, 0, -1, hash_ids=[1]), turn(3, 1, 0)],
                               ":2: session 3: hash_ids on some turns only"),
    "hash ids not the prompt's blocks": (
        [turn(3, 0, -1, new=40, hash_ids=ids(2))],
        ":1: session 3: turn 0: hash_ids: 2 ids, but its 40-token prompt has 3 blocks"),
    "leading ids not the parent's": (
        [turn(3, 0, -1, new=40, hash_ids=ids(3)),
         turn(3, 1, 0, new=3, hash_ids=[9, 1, 2])],
        ":2: session 3: turn 1: hash_ids: its first 2 ids are not its parent's"),
    "a gap infinite": ([turn(3, 0, -1), turn(3, 1, 0, gap=float("inf"))],
                       ":2: session 3: gap_s: expected a number of seconds >= 0, got inf"),
    "a gap not a number": ([turn(3, 0, -1), turn(3, 1, 0, gap=float("nan"))],
                           ":2: session 3: gap_s: expected a number of seconds >= 0, got nan"),
    "a gap negative": ([turn(3, 0, -1), turn(3, 1, 0, gap=-1.0)],
                       ":2: session 3: gap_s: expected a number of seconds >= 0, got -1"),
    "a gap past any replay": ([turn(3, 0, -1), turn(3, 1, 0, gap=1e300)],
                              ":2: session 3: its gaps chain to turn 1, 1e+300 s after its "
                              "start at 0 s; a replay spans at most 1e+09 s"),
    "gaps chaining past a replay": (
        [turn(3, 0, -1), turn(3, 1, 0, gap=6e8), turn(3, 2, 1, gap=6e8), turn(3, 3, 2)],
        ":4: session 3: its gaps chain to turn 3, 1.2e+09 s after its start"),
    "a join after a sub-agent's chain": (  # the next turn waits for the sub-agent's subtree
        [turn(3, 0, -1), turn(3, 1, 0, gap=6e8, kind="subagent"),
         turn(3, 2, 1, gap=3e8), turn(3, 3, 0, gap=2e8)],
        ":4: session 3: its gaps chain to turn 3, 1.1e+09 s after its start"),
    "a start and gaps past a replay": (
        [turn(2, 0, -1), turn(3, 0, -1, at=5e8), turn(3, 1, 0, gap=6e8)],
        ":3: session 3: its gaps chain to turn 1, 6e+08 s after its start at 5e+08 s"),
    "a turn that can never fit": (  # its context and input, 1,000 + 5 + 20 tokens, and 5 out
        [turn(3, 0, -1, new=1000), turn(3, 1, 0, new=20), turn(3, 2, 1)],
        ":2: session 3: turn 1 can never run: its 1,025-token prompt and 5 output tokens need "
        "1,030 tokens (prompt_len + max(max_new_tokens, lookahead 1)); a DP rank's KV pool "
        "holds 64 blocks of 16 tokens (1,024 tokens), it needs 65"),
    "a sub-agent that can never fit": (
        [turn(3, 0, -1, new=20), turn(3, 1, 0, kind="subagent", new=10),
         turn(3, 2, 0, kind="subagent", new=1100)],
        ":3: session 3: turn 2 can never run: its 1,125-token prompt and 5 output tokens"),
}


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_session_file_exits_2_naming_file_line_and_session(tmp_path, capsys, command,
                                                                case):
    rows, message = BAD[case]
    assert main([command, str(workload(tmp_path, rows))]) == 2
    assert f"{tmp_path / 's.jsonl'}{message}" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_each_turn_must_fit_with_the_context_it_holds(tmp_path, capsys):
    path = workload(tmp_path, BAD["a turn that can never fit"][0])
    assert main(["validate", str(path), "--set", "engine.num_kv_blocks=65"]) == 2
    assert ":3: session 3: turn 2 can never run: its 1,040-token prompt" \
        in capsys.readouterr().err
    assert main(["validate", str(path), "--set", "engine.num_kv_blocks=66"]) == 0


@pytest.mark.parametrize("extra", ["trace: {file: s.jsonl}\nload: {mode: offline}\n",
                                   "trace: {file: s.jsonl, time_scale: 0.5}\n"])
def test_a_sessions_start_counts_as_the_replay_starts_it(tmp_path, extra):
    path = workload(tmp_path, BAD["a start and gaps past a replay"][0])
    path.write_text(path.read_text().replace("trace: {file: s.jsonl}\n", "") + extra)
    assert main(["validate", str(path)]) == 0  # 0 or 2.5e8 s, and 6e8 s of gaps


def test_a_pool_sized_on_the_device_is_left_to_the_engine(tmp_path, capsys):
    # a GPU's `auto` pool is known once the model is on it: the engine rejects the turn then
    path = workload(tmp_path, [turn(3, 0, -1, new=70_000)])
    path.write_text(f"output: {tmp_path / 'r'}\ntrace: {{file: s.jsonl}}\nmodel: tiny\n"
                    f"device: cuda\nengine: {{block_size: 16}}\n")
    assert main(["validate", str(path)]) == 0
    for pool in ("device=cpu", "engine.num_kv_blocks=4096"):  # a CPU's: the configured 4,096
        assert main(["validate", str(path), "--set", pool]) == 2
        assert ":1: session 3: turn 0 can never run: its 70,000-token prompt" \
            in capsys.readouterr().err


def test_a_fan_out_wider_than_the_engine_holds_queues_and_runs(tmp_path):
    # eight sub-agents on one rank of 2 sequences and 64 blocks (each needs 41, 37 of them
    # its parent's context's): they queue, and the next turn comes after the last
    rows = [turn(3, 0, -1, new=600)] + [turn(3, k, 0, kind="subagent", new=40)
                                        for k in range(1, 9)] + [turn(3, 9, 0, new=5)]
    (done,) = run_workload(load_workload(workload(tmp_path, rows)))
    requests = pd.read_parquet(done.path / "requests.parquet").sort_values("turn")
    assert (requests["status"] == "finished").all() and len(requests) == 10
    assert requests["arrival_s"].iloc[-1] >= requests["last_token_s"].iloc[1:-1].max()
