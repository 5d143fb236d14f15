"""The full chain on the CPU: LLMEngine -> C++ scheduler -> Worker forward of the tiny model."""

import numpy as np
import pytest

from engine import EngineConfig, LLMEngine, SchedulerConfig

pytestmark = pytest.mark.core


def replay(n=200, seed=0, **sched):
    """n synthetic requests (short prompts and outputs) arriving together, drained."""
    cfg = EngineConfig(scheduler=SchedulerConfig(**{**dict(max_num_batched_tokens=256,
                                                          max_num_seqs=32, num_kv_blocks=512,
                                                          block_size=16), **sched}),
                       model="tiny", device="cpu", seed=seed)
    engine = LLMEngine(cfg)
    rng = np.random.default_rng(seed)
    lengths = [(int(rng.integers(4, 48)), int(rng.integers(1, 12))) for _ in range(n)]
    for i, (p, m) in enumerate(lengths):
        engine.add_request(i, prompt_len=p, max_new_tokens=m)
    return engine, lengths, engine.run()


def left(records):
    """seq_id -> the scheduler's record of each sequence as it left (finished, rejected)."""
    return {r.seq_id: r for record in records for r in record.post.left}


@pytest.mark.parametrize("overlap", [False, True])
def test_every_request_generates_exactly_max_new_tokens(overlap):
    engine, lengths, records = replay(overlap=overlap)
    finished = np.concatenate([r.finished for r in records]).tolist()
    assert sorted(finished) == list(range(len(lengths)))
    gone = left(records)
    for i, (_, m) in enumerate(lengths):
        assert (gone[i].status, gone[i].output_len) == ("finished", m)
    assert engine.scheduler.num_live == 0  # every finished sequence released
    assert engine.scheduler.num_free_blocks() == 512
    assert [r.step for r in records] == list(range(len(records)))
    assert {r.phase for r in records} == {"prompt", "decode"}
    assert all(r.forward_ns > 0 for r in records if any(len(b.seq_ids) for b in r.batches))


@pytest.mark.slow
def test_mtp_with_the_seeded_acceptance_model():
    engine, lengths, records = replay(n=40, num_mtp=1)
    assert all(left(records)[i].output_len == m for i, (_, m) in enumerate(lengths))
    decode_q = np.concatenate([b.seqlen_q[b.kind == 2] for r in records for b in r.batches])
    assert set(decode_q.tolist()) == {2}
    assert sum((r.executed_flops - r.model_flops).sum() for r in records) > 0  # rejected drafts


def test_generated_tokens_are_the_models_greedy_choice():
    # No overlap, no MTP: decoding A alone twice gives the same tokens (a real forward,
    # deterministic weights), and a different seed gives different ones.
    outs = []
    for seed in (3, 3, 4):
        engine = LLMEngine(EngineConfig(model="tiny", device="cpu", seed=seed))
        engine.add_request(0, prompt_token_ids=[5, 6, 7, 8, 9], max_new_tokens=6)
        while engine.scheduler.seq(0).output_len < 5:
            engine.step()
        outs.append(engine.tokens(0)[5:])
    assert outs[0] == outs[1] and outs[0] != outs[2] and len(outs[0]) == 5


def test_dp_ranks_in_one_process_run_empty_steps():
    engine, lengths, records = replay(n=1, dp_size=2)  # round robin: rank 1 stays idle
    assert records[0].phase == "prompt" and records[0].batches[1].empty
    assert all(r.batches[1].empty for r in records)


def test_request_needs_ids_or_length():
    engine = LLMEngine(EngineConfig(model="tiny", device="cpu"))
    with pytest.raises(ValueError, match="exactly one of prompt_token_ids and prompt_len"):
        engine.add_request(0, max_new_tokens=3)
    with pytest.raises(ValueError, match="exactly one of"):
        engine.add_request(0, prompt_token_ids=[1], prompt_len=1, max_new_tokens=3)
    with pytest.raises(ValueError, match="request 0: prompt_len must be >= 1, got -3"):
        engine.add_request(0, prompt_len=-3, max_new_tokens=3)


def test_overlap_mtp_sequences_finishing_with_work_in_flight():
    # Accepted drafts finish sequences early while their next step is in flight: that work
    # is discarded, and the Worker keeps their tokens until the forward holding it is done.
    engine, lengths, records = replay(n=60, overlap=True, num_mtp=1)
    assert sum(r.discarded_tokens for r in records) > 0
    assert all(left(records)[i].output_len == m for i, (_, m) in enumerate(lengths))


def test_prompt_longer_than_the_budget_is_prefilled_in_chunks():
    engine = LLMEngine(EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=16,
                                                              max_prefill_chunk=8),
                                    model="tiny", device="cpu"))
    engine.add_request(0, prompt_len=40, max_new_tokens=2)  # chunks with no logits at all
    records = engine.run()
    assert [r.phase for r in records] == ["prompt"] * 5 + ["decode"]
    assert left(records)[0].output_len == 2


def test_completion_engine_decodes_after_the_supplied_first_token():
    engine = LLMEngine(EngineConfig(scheduler=SchedulerConfig(engine_type="completion"),
                                    model="tiny", device="cpu"))
    engine.add_request(0, prompt_token_ids=[1, 2, 3], max_new_tokens=4)
    engine.step()
    assert len(engine.tokens(0)) == engine.scheduler.seq(0).num_tokens == 5


def test_completion_engine_decodes_a_transferred_request_once_its_kv_arrived():
    engine = LLMEngine(EngineConfig(scheduler=SchedulerConfig(engine_type="completion"),
                                    model="tiny", device="cpu"))
    assert engine.add_request(0, prompt_token_ids=[1, 2, 3], max_new_tokens=3,
                              kv_transfer=True).status == "waiting"
    engine.add_request(1, prompt_token_ids=[4, 5], max_new_tokens=3)
    record = engine.step()  # both admitted; 0 holds its blocks and computes nothing
    assert record.batches[0].seq_ids.tolist() == [1] and record.batches[0].num_running == 2
    assert engine.scheduler.seq(0).status == "running" and engine.scheduler.seq(0).kv_pending
    assert len(engine.tokens(0)) == 4  # its prompt and the first token, held by the Worker
    engine.kv_arrived(0)
    records = engine.run()
    assert left(records)[0].output_len == 3 and engine.scheduler.num_live == 0
    with pytest.raises(ValueError, match="unknown seq_id 0"):
        engine.kv_arrived(0)


def test_the_null_executor_serves_every_request_computing_nothing():
    engine = LLMEngine(EngineConfig(executor="null", scheduler=SchedulerConfig(
        max_num_batched_tokens=64, num_kv_blocks=64, num_mtp=1)))
    for i in range(20):
        engine.add_request(i, prompt_len=5 + i, max_new_tokens=1 + i % 7)
    records = engine.run()
    assert all(left(records)[i].output_len == 1 + i % 7 for i in range(20))
    assert all(r.forward_ns == 0 and r.modeled and r.model_flops.sum() == 0 for r in records)
    with pytest.raises(ValueError, match="the null executor generates no tokens"):
        engine.tokens(0)
