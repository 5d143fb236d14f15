"""The KV links' fluid sharing and the P/D routers (engine._core's, bound from
csrc/replay/routers.hpp), by hand arithmetic against docs/disaggregation.md's rules."""

import math

import pytest

from engine._core import DecodeRouter, PrefillRouter, awaited_blocks
from harness.replay.kv_links import Links

GB = 1e9


def test_one_transfer_moves_at_the_slower_end():
    links = Links()
    links.start(0, "p0", "d0", 10 * GB, sender_bps=50 * GB, receiver_bps=25 * GB, now=1.0)
    assert links.next_end() == (pytest.approx(1.4), 0)


def test_two_transfers_on_one_sender_share_it_then_the_survivor_speeds_up():
    links = Links()
    links.start(0, "p0", "d0", 10 * GB, 50 * GB, 100 * GB, now=0.0)
    links.start(1, "p0", "d1", 20 * GB, 50 * GB, 100 * GB, now=0.0)
    # 25 GB/s each: the first ends at 0.4 s, the second has 10 GB left, then alone at 50
    t, key = links.next_end()
    assert (t, key) == (pytest.approx(0.4), 0)
    links.finish(key, t)
    assert links.next_end() == (pytest.approx(0.4 + 10 / 50), 1)


def test_a_later_transfer_slows_the_one_in_flight_from_its_start():
    links = Links()
    links.start(0, "p0", "d0", 10 * GB, 10 * GB, 10 * GB, now=0.0)
    links.start(1, "p1", "d0", 10 * GB, 10 * GB, 10 * GB, now=0.5)  # the same receiver
    # transfer 0: 5 GB alone by 0.5 s, then 5 GB at 5 GB/s: ends at 1.5 s
    assert links.next_end() == (pytest.approx(1.5), 0)


def test_transfers_on_different_devices_do_not_share():
    links = Links()
    links.start(0, "p0", "d0", 10 * GB, 10 * GB, 10 * GB, now=0.0)
    links.start(1, "p1", "d1", 10 * GB, 10 * GB, 10 * GB, now=0.0)
    assert links.next_end()[0] == pytest.approx(1.0)
    assert len(links) == 2


def test_no_transfer_no_end():
    assert Links().next_end() == (math.inf, None)


def test_round_robin_prefill_and_decode():
    prefill = PrefillRouter("round_robin", 3, 100, 16)
    assert [prefill.route(10, ()) for _ in range(4)] == [0, 1, 2, 0]
    decode = DecodeRouter("round_robin", 2)
    assert [decode.route([0, 0]) for _ in range(3)] == [0, 1, 0]


def test_least_tokens_counts_prompt_tokens_until_prefilled():
    router = PrefillRouter("least_tokens", 2, 100, 16)
    assert router.route(1000, ()) == 0
    assert router.route(10, ()) == 1
    assert router.route(10, ()) == 1  # 20 < 1000
    router.prefilled(0, 1000)
    assert router.route(10, ()) == 0


def test_least_kv_takes_the_most_free_blocks_lower_on_ties():
    router = DecodeRouter("least_kv", 3)
    assert router.route([5, 9, 9]) == 1
    assert router.route([5, 5, 5]) == 0


def test_cache_aware_follows_the_shared_prefix_above_30_percent():
    router = PrefillRouter("cache_aware", 2, 1000, 16)
    a = [1, 2, 3, 4]
    assert router.route(64, a) == 0  # nothing cached anywhere: the lower instance
    router.prefilled(0, 64)  # idle again: loads are equal, but 0 holds 4 blocks
    assert router.route(64, [9, 8, 7, 6]) == 1  # no match: the smaller record
    # a later turn sharing 2 of 4 blocks (32 of 64 tokens: 50 % > 30 %) follows them,
    # though instance 0 is now the more loaded
    assert router.route(64, [1, 2, 5, 6]) == 0
    # 1 shared block of 64 tokens (25 %) is below the threshold: the smaller record, 1's
    assert router.route(64, [9, 10, 11, 12]) == 1


def test_cache_aware_balances_past_both_bounds():
    router = PrefillRouter("cache_aware", 2, 10_000, 16)
    # every request shares the prefix: instance 0 takes them while 0 - 65 is within 64
    assert [router.route(64, [1, 2, 3, 4]) for _ in range(65)] == [0] * 65
    assert router.route(64, [1, 2, 3, 4]) == 1  # 65 - 0 > 64 and 65 > 1.5 x 0
    # within the bounds again, and both hold the prefix now: the less loaded
    assert router.route(64, [1, 2, 3, 4]) == 1


@pytest.mark.parametrize("capacity, evicted", [(4, True), (100, False)])
def test_cache_aware_forgets_the_least_recently_routed_beyond_capacity(capacity, evicted):
    router = PrefillRouter("cache_aware", 2, capacity, 16)
    assert router.route(64, [1, 2, 3, 4]) == 0
    assert router.route(64, [5, 6, 7, 8]) == 1  # no match: the smaller record
    router.prefilled(0, 64)
    router.prefilled(1, 64)
    # shares 1 and 2 (50 %): to 0, whose 3 and 4 are now the least recently routed; four
    # blocks of capacity leave room for none of them
    assert router.route(64, [1, 2, 13, 14]) == 0
    # a prompt that starts with 3, 4 follows them while 0 remembers them; else no match,
    # and of two records of four blocks the less loaded instance's, 1's
    assert router.route(64, [3, 4, 20, 21]) == (1 if evicted else 0)


def test_session_affinity_follows_a_session_until_its_instance_is_overloaded():
    router = PrefillRouter("session_affinity", 2, 10_000, 16)
    # a first turn goes where cache_aware sends it: nothing cached, the lower instance
    assert router.route(64, [1, 2, 3, 4], 7) == 0
    # no prefix shared (hash ids of its own), still the session's instance
    assert router.route(64, [9, 9, 9, 9], 7) == 0
    assert router.route(64, [1, 2, 3, 4], 8) == 0  # another session's first: its prefix
    # a turn of no session: cache_aware's, the smaller record
    assert router.route(64, [5, 6, 7, 8]) == 1
    # session 8 piles onto 0: 64 requests there against 1
    assert {router.route(64, [1, 2, 3, 4], 8) for _ in range(61)} == {0}
    # 64 and 65 are within 64 of 1: session 7 stays; at 66, past both bounds, it moves to
    # the less loaded instance, and stays there
    assert [router.route(64, [1, 2, 3, 4], 7) for _ in range(4)] == [0, 0, 1, 1]


def test_only_cache_aware_reads_block_hashes_one_per_full_block():
    assert PrefillRouter("round_robin", 2, 100, 16).hashes([1, 2, 3, 4], None, 64) == []
    router = PrefillRouter("cache_aware", 2, 100, 16)
    assert router.hashes(None, None, 64) == []
    full = router.hashes([1, 2, 3, 4], None, 64)
    assert len(set(full)) == 4 and router.hashes([1, 2, 3, 4], 16, 40) == full[:2]
    # hash ids of 32-token blocks name two engine blocks each
    assert len(router.hashes([1, 2], 32, 64)) == 4


def test_awaited_blocks_are_the_prompts_blocks_rounded_up():
    assert awaited_blocks([16, 17, 1], 16) == 1 + 2 + 1
    assert awaited_blocks([], 16) == 0


def test_a_router_refuses_what_it_cannot_route():
    with pytest.raises(ValueError, match="unknown policy least_kv"):
        PrefillRouter("least_kv", 2, 100, 16)
    with pytest.raises(ValueError, match="unknown policy cache_aware"):
        DecodeRouter("cache_aware", 2)
    with pytest.raises(ValueError, match="free blocks of each of the 2 instances, got 1"):
        DecodeRouter("least_kv", 2).route([5])
    with pytest.raises(ValueError, match="no instance 2"):
        PrefillRouter("round_robin", 2, 100, 16).prefilled(2, 10)
