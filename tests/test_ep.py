"""Expert parallelism's pieces that need no process group: the placement, the all-to-all's
split sizes, the payloads, the micro-batch split, the refusals (engine/ep.py)."""

import pytest
import torch

from engine.deployment import Deployment, DeploymentError
from engine.ep import ExpertPlacement, check_real, payload, plan_dispatch
from engine.ep_comm import decode, encode
from engine.model import ForwardBatch, split_rows
from engine.model_config import load_model_config

TINY = load_model_config("tiny")  # 8 routed experts, top-2


def test_split_sizes_of_a_hand_computed_routing():
    # ep 2, no replicas: rank 0 holds experts 0-3 (slots 0-3), rank 1 experts 4-7.
    routes = ExpertPlacement(8, 0, 2, rank=0).routes()
    experts = torch.tensor([[0, 5], [1, 2], [6, 7], [3, 4]])
    weights = torch.tensor([[0.6, 0.4], [0.7, 0.3], [0.5, 0.5], [0.2, 0.8]], dtype=torch.float64)
    plan = plan_dispatch(experts, weights, *routes, ep=2)
    # token 0 -> both ranks, 1 -> rank 0 only (once, for two experts), 2 -> rank 1, 3 -> both
    assert plan.counts == [3, 3]
    assert plan.tokens.tolist() == [0, 1, 3, 0, 2, 3]
    assert plan.slots.tolist() == [[0, -1], [1, 2], [3, -1], [-1, 1], [2, 3], [-1, 0]]
    assert plan.weights.tolist() == [[0.6, 0], [0.7, 0.3], [0.2, 0], [0, 0.4], [0.5, 0.5],
                                     [0, 0.8]]


def test_no_tokens_send_nothing_to_anyone():
    plan = plan_dispatch(torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, 2),
                         *ExpertPlacement(8, 0, 4, rank=3).routes(), ep=4)
    assert plan.counts == [0, 0, 0, 0] and plan.tokens.numel() == 0


def test_redundant_experts_are_replicas_of_the_first_placed_round_the_ranks():
    # 8 + 4 slots over 4 ranks, 3 each: expert p mod 8 in slot p
    p = [ExpertPlacement(8, 4, 4, rank=r) for r in range(4)]
    assert [x.local_experts for x in p] == [[0, 1, 2], [3, 4, 5], [6, 7, 0], [1, 2, 3]]
    to_rank, to_slot = p[1].routes()
    # its own replica of 3; expert 0 on ranks 0 and 2: rank 1 mod 2 copies -> the second
    assert (to_rank[3].item(), to_slot[3].item()) == (1, 0)
    assert (to_rank[0].item(), to_slot[0].item()) == (2, 2)
    to_rank, _ = p[0].routes()
    assert to_rank.tolist() == [0, 0, 0, 1, 1, 1, 2, 2]


@pytest.mark.parametrize("wire, bound", [(torch.bfloat16, 2 ** -8), (torch.float8_e4m3fn, 2 ** -3),
                                         (torch.int8, 1 / 254)])
def test_payloads_come_back_within_their_format_s_precision(wire, bound):
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(0)) * 3
    data, scale = encode(x, wire)
    assert data.dtype == (wire if scale is None else torch.uint8)
    error = (decode(data, scale, wire, x.dtype) - x).abs() / x.abs().amax(-1, keepdim=True)
    assert 0 < error.max() <= bound
    assert encode(x, None)[0] is x and encode(x, torch.float32)[0] is x


def test_the_cpu_sends_the_activations_own_dtype():
    assert payload("fp8", torch.device("cpu"), torch.float32) is None
    assert payload("fp8", torch.device("cuda"), torch.bfloat16) == torch.float8_e4m3fn
    assert payload("bf16", torch.device("cuda"), torch.bfloat16) is None  # no narrower


def batch_of(lengths):
    starts = [0]
    for q in lengths:
        starts.append(starts[-1] + q)
    ids = torch.arange(starts[-1])
    return ForwardBatch(input_ids=ids, positions=ids, slot_mapping=ids, query_start=starts,
                        seqlen_k=list(lengths), block_tables=torch.zeros(len(lengths), 1),
                        decode=[False] * len(lengths))


def test_micro_batches_are_whole_rows_halving_the_tokens():
    a, b = split_rows(batch_of([5, 1, 1, 3]))  # 10 tokens: 5 | 5
    assert a.query_start == [0, 5] and b.query_start == [0, 1, 2, 5]
    assert b.input_ids.tolist() == [5, 6, 7, 8, 9] and b.seqlen_k == [1, 1, 3]
    a, b = split_rows(batch_of([]))  # nothing: two empty micro-batches
    assert a.query_start == b.query_start == [0] and len(b.input_ids) == 0


@pytest.mark.parametrize("values, key", [
    (dict(devices=2, attention_dp=1, attention_tp=2, moe_ep=2), "deployment.attention.tp"),
    (dict(devices=2, attention_dp=2, moe_ep=1, moe_tp=2), "deployment.moe.tp"),
    (dict(devices=2, attention_dp=2, moe_ep=2, dense_tp=2), "deployment.dense.tp"),
    (dict(devices=4, attention_dp=4, moe_ep=4), "deployment.moe.ep"),  # 2 ranks run it
    (dict(devices=2, attention_dp=2, moe_ep=2, redundant_experts=1), "deployment.moe.ep")])
def test_what_the_real_engine_does_not_run_is_refused_by_key(values, key):
    with pytest.raises(DeploymentError, match=key):
        check_real(Deployment(**values), TINY, 2, torch.device("cpu"))


def test_fp4_payloads_are_refused_where_they_would_be_sent():
    d = Deployment(devices=2, attention_dp=2, moe_ep=2,
                   precision=dict(Deployment().precision, dispatch="fp4"))
    check_real(d, TINY, 2, torch.device("cpu"))  # the CPU sends the activations' dtype
    with pytest.raises(DeploymentError, match="deployment.precision.dispatch"):
        check_real(d, TINY, 2, torch.device("cuda"))
