"""A prefilled sequence's KV, gathered from a prompt engine's paged cache and scattered
into a completion engine's reserved blocks, continues the sequence exactly: with greedy
sampling in float64, the P/D pair's tokens are a co-located engine's (engine/kv_transfer.py;
the processes that move it: tests/test_pd_ranks.py)."""

import pytest
import torch

from engine import LLMEngine
from engine.config import EngineConfig
from engine.kv_transfer import gather, handed_off, kv_shape, receive, scatter
from engine.scheduler_config import SchedulerConfig

PROMPTS = [5, 17, 33, 16, 40, 1]  # across block boundaries, one block exactly, one token
NEW = 7


def engine(engine_type="normal", num_mtp=0, blocks=128):
    return LLMEngine(EngineConfig(
        scheduler=SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=16,
                                  num_kv_blocks=blocks, engine_type=engine_type,
                                  num_mtp=num_mtp),
        model="tiny", device="cpu", sampling="greedy", keep_tokens=True,
        seed=3))


def colocated(num_mtp):
    e = engine(num_mtp=num_mtp)
    for i, n in enumerate(PROMPTS):
        e.add_request(i, prompt_len=n, max_new_tokens=NEW)
    e.run()
    return e.output_tokens()


def disaggregated(num_mtp):
    """Prefill on one engine, the KV moved at each hand-off, decode on another whose pool
    is laid out differently (its blocks are not the prefill's)."""
    prefill, decode = engine("prompt", num_mtp), engine("completion", num_mtp, blocks=97)
    decode.add_request(99, prompt_len=50, max_new_tokens=3)  # takes the first blocks
    for i, n in enumerate(PROMPTS):
        prefill.add_request(i, prompt_len=n, max_new_tokens=NEW)
    moved = {}
    while prefill.has_unfinished():
        record = prefill.step()
        for seq_id, h in handed_off(prefill, record, lambda s: True).items():
            assert h.kv is not None and h.kv.shape == kv_shape(
                prefill.executor.workers[0].kv_cache, PROMPTS[seq_id])
            decode.add_request(seq_id, prompt_len=PROMPTS[seq_id], max_new_tokens=NEW,
                               kv_transfer=True, first_token=h.first_token)
            moved[seq_id] = h.kv
    while decode.has_unfinished():
        decode.step()  # admits (reserves) the sequences in transfer
        for seq_id in [s for s in moved if decode.scheduler.seq(s).status == "running"]:
            receive(decode, seq_id, moved.pop(seq_id))
    first = prefill.output_tokens()
    rest = decode.output_tokens()
    return {i: first[i] + rest[i] for i in range(len(PROMPTS))}


def test_a_pd_pair_continues_every_sequence_token_for_token():
    """With MTP: its module's cache layer moves too; the decode's first step has no draft
    to verify (the prefill's is not sent), which changes acceptance, never tokens."""
    assert disaggregated(num_mtp=1) == colocated(num_mtp=1)


def test_gather_then_scatter_moves_exactly_the_prompt_positions():
    cache = torch.arange(2 * 6 * 4 * 3, dtype=torch.float64).view(2, 6, 4, 3)
    kv = gather(cache, [4, 1, -1], 6)  # positions 0-3 in block 4, 4-5 in block 1
    assert kv.shape == (2, 6, 3)
    assert torch.equal(kv[:, :4], cache[:, 4]) and torch.equal(kv[:, 4:], cache[:, 1, :2])
    other = torch.zeros_like(cache)
    scatter(other, [0, 5], kv)
    assert torch.equal(other[:, 0], cache[:, 4]) and torch.equal(other[:, 5, :2], cache[:, 1, :2])
    assert other[:, 5, 2:].abs().sum() == 0 and other[:, 1:5].abs().sum() == 0


def test_a_table_too_short_for_the_positions_is_refused():
    cache = torch.zeros(1, 4, 4, 2)
    with pytest.raises(ValueError, match="6 positions need 2 blocks"):
        gather(cache, [3, -1], 6)
    with pytest.raises(ValueError, match="does not fit a cache of 1 layers of width 2"):
        scatter(cache, [0], torch.zeros(2, 3, 2))
