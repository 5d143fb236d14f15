"""Expert parallelism over processes (gloo on the CPU): the sharded MoE layer against the
unsharded one, an empty rank in the collectives, and the tiny model's greedy tokens as DP
ranks with EP against one process. The 2-rank cases share one pair of rank processes."""

import copy
import os
import socket
import traceback
from datetime import timedelta
from queue import Empty

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from engine import EngineConfig, LLMEngine, SchedulerConfig
from engine.deployment import Deployment
from engine.dp import DPEngine
from engine.ep import EPGroup, ExpertPlacement, attach
from engine.model import DeepSeekModel, drive
from engine.model_config import load_model_config

pytestmark = [pytest.mark.slow, pytest.mark.core]

HUNG_S = 120  # a rank that has not answered by then is stuck in a collective


def spawn(fn, world, *args):
    """fn(rank, world, *args) on `world` processes in one gloo group; their results."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = [ctx.Process(target=_rank, args=(fn, r, world, port, queue, args))
             for r in range(world)]
    for p in ranks:
        p.start()
    results = {}
    try:
        while len(results) < world:
            rank, ok, result = queue.get(timeout=HUNG_S)
            assert ok, f"rank {rank} failed:\n{result}"
            results[rank] = result
    except Empty:
        pytest.fail(f"ranks {sorted(set(range(world)) - set(results))} hung for {HUNG_S} s")
    finally:
        for p in ranks:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world)]


def _rank(fn, rank, world, port, queue, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=HUNG_S / 2))
    try:
        queue.put((rank, True, fn(rank, world, *args)))
    except BaseException:
        queue.put((rank, False, traceback.format_exc()))
    finally:
        dist.destroy_process_group()


def moe_errors(rank, world, redundant, tokens):
    """Per dtype (float64, float32), the largest difference from the unsharded layer of
    this rank's tokens, with one and two micro-batches, and the rank's dispatch time."""
    return [layer_errors(rank, world, redundant, tokens[rank], dtype)
            for dtype in (torch.float64, torch.float32)]


def layer_errors(rank, world, redundant, tokens, dtype):
    model = DeepSeekModel(load_model_config("tiny"), seed=0).to(dtype)
    moe = model.layers[1].ffn
    unsharded = copy.deepcopy(moe)
    x = torch.randn(tokens, 64, dtype=dtype, generator=torch.Generator().manual_seed(rank))
    attach(model, Deployment(devices=world, attention_dp=world, moe_ep=world,
                             redundant_experts=redundant), rank, world)
    assert len(moe.experts) == (8 + redundant) // world
    with torch.inference_mode():
        expected = unsharded(x)
        one = moe(x)
        half = len(x) // 2
        two = torch.cat(drive([moe.staged(x[:half]), moe.staged(x[half:])]))
    model.ep.comm.collect()
    return ((one - expected).abs().max().item() if len(x) else 0.0,
            (two - expected).abs().max().item() if len(x) else 0.0,
            model.timer.ns["dispatch"])


def each(rank, world, calls):
    """Several rank functions in turn, in one process group: name -> result."""
    return {name: fn(rank, world, *args) for name, (fn, args) in calls.items()}


@pytest.fixture(scope="module")
def two_ranks():
    """What the tests below ask of 2 ranks, run in turn by one pair of rank processes
    (starting them is most of each test's time): per rank, name -> result."""
    calls = {("layer", r, t): (moe_errors, (r, t)) for r, t in ((0, (9, 5)), (2, (6, 0)))}
    calls["fp8"] = (fp8_error, ())
    for m in (1, 2):
        calls["tokens", m] = (dp_tokens, (Deployment(devices=2, attention_dp=2, moe_ep=2,
                                                     micro_batches=m),))
    return spawn(each, 2, calls)


@pytest.mark.parametrize("world, redundant, tokens", [
    (2, 0, (9, 5)), (2, 2, (6, 0)),  # the second: rank 1 has no tokens, and joins
    (4, 4, (7, 0, 3, 12))])
def test_ep_layer_equals_the_unsharded_layer(world, redundant, tokens, request):
    # A sharded layer sums a token's experts in another order (per rank, then over
    # ranks): float64 checks the arithmetic; in float32 the rounding stays below 1e-5.
    if world == 2:
        results = [rank["layer", redundant, tokens]
                   for rank in request.getfixturevalue("two_ranks")]
    else:
        results = spawn(moe_errors, world, redundant, tokens)
    for (one64, two64, dispatch_ns), (one32, two32, _) in results:
        assert one64 < 1e-12 and two64 < 1e-12
        assert one32 < 1e-5 and two32 < 1e-5
        assert dispatch_ns > 0  # every rank exchanged, the empty one too


def fp8_error(rank, world):
    """The relative error of the layer with an FP8 dispatch and a BF16 combine."""
    model = DeepSeekModel(load_model_config("tiny"), seed=0)
    moe = model.layers[1].ffn
    unsharded = copy.deepcopy(moe)
    group = dist.new_group(list(range(world)))
    model.use_ep(EPGroup(group, ExpertPlacement(8, 0, world, rank), torch.device("cpu"),
                         model.timer, dispatch=torch.float8_e4m3fn, combine=torch.bfloat16))
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(rank))
    with torch.inference_mode():
        expected = unsharded(x)
        return ((moe(x) - expected).norm() / expected.norm()).item()


def test_quantised_payloads_travel_with_their_scales(two_ranks):
    errors = [rank["fp8"] for rank in two_ranks]
    assert all(0 < e < 0.1 for e in errors), errors  # E4M3 keeps 3 mantissa bits


def config(deployment=None):
    return EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=32, num_kv_blocks=64,
                                                  num_mtp=1),
                        model="tiny", device="cpu", mtp_acceptance=None, deployment=deployment)


def requests():
    ids = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    # rank 1 (odd ids) finishes first, then steps along empty while rank 0 decodes
    return [dict(request_id=i, prompt_token_ids=ids[5 * i:11 * i + 6],
                 max_new_tokens=2 if i % 2 else 6) for i in range(5)]


def keep_tokens(engine):
    """Every request's token ids as it is dropped (finished): id -> prompt + output."""
    kept, executor = {}, engine.executor
    drop = executor.drop

    def keeping(seq_id):
        kept[seq_id] = list(executor.tokens(0, seq_id))
        drop(seq_id)
    executor.drop = keeping
    return kept


def dp_tokens(rank, world, deployment):
    dp = DPEngine(config(deployment), rank, world)
    dp.shard_experts()
    kept = keep_tokens(dp.engine)
    for r in requests():
        dp.add_request(**r)
    records = dp.run()
    return kept, [(len(r.batches[0].seq_ids), {p: getattr(r.flops[0], f"{p}_s") for p in (
        "attention", "dense", "experts", "dispatch", "combine")}) for r in records]


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_greedy_tokens_as_dp_ranks_with_ep_equal_one_process(two_ranks, micro_batches):
    engine = LLMEngine(config())
    alone = keep_tokens(engine)
    for r in requests():
        engine.add_request(**r)
    engine.run()
    assert sorted(alone) == list(range(5))
    (kept0, steps0), (kept1, steps1) = (rank["tokens", micro_batches] for rank in two_ranks)
    assert sorted(kept0) == [0, 2, 4] and sorted(kept1) == [1, 3]
    assert {**kept0, **kept1} == alone  # float32: no near-tie flipped
    assert len(steps0) == len(steps1)  # every step on both ranks, empty ones included
    assert any(rows == 0 for rows, _ in steps0 + steps1)  # the vote's empty steps joined
    for rows, parts in steps0 + steps1:  # every rank runs every layer, on no tokens too
        assert all(parts[p] > 0 for p in ("attention", "dense", "dispatch", "combine"))
        assert parts["experts"] > 0 or rows == 0
