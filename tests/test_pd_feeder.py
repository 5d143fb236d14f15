"""The P/D feeder's decode routing of real ranks' hand-offs (harness/ranks/pd_replay.py),
against fake ranks: least_kv counts the prompt blocks of the sequences it added to a decode
rank since that rank's last report, so a burst of hand-offs is spread."""

from types import SimpleNamespace

import numpy as np

from harness.ranks.messages import Add, Prefilled, Room
from harness.ranks.pd_join import Transfers
from harness.ranks.pd_replay import PDFeeder
from harness.replay.driver import Requests

BLOCK = 16


class FakeRanks:
    """One prefill rank (0) and two one-rank decode instances (1, 2) of 64 blocks each."""

    def __init__(self) -> None:
        config = SimpleNamespace(scheduler=SimpleNamespace(num_kv_blocks=64, block_size=BLOCK))
        self.engines = [SimpleNamespace(config=config)] * 3
        self.groups = ((0,), (1,), (2,))
        self.events: list = []
        self.sent: list = []
        self.done: set = set()

    def send(self, rank, message):
        self.sent.append((rank, message))


def feeder(n: int):
    service = SimpleNamespace(prefill=SimpleNamespace(instances=1), prefill_router="round_robin",
                              decode=SimpleNamespace(instances=2), decode_router="least_kv")
    requests = Requests(np.zeros(n), np.full(n, 10 * BLOCK), np.full(n, 8))
    ranks = FakeRanks()
    return PDFeeder(service, ranks, requests, Transfers(n)), ranks


def decode_ranks(ranks) -> list:
    return [rank for rank, message in ranks.sent if isinstance(message, Add) and rank != 0]


def prefilled(ranks, ids):
    ranks.events += [Prefilled(0, i, 7, 1000, 0.1) for i in ids]


def test_a_burst_of_hand_offs_is_spread_over_the_decode_instances():
    f, ranks = feeder(4)
    prefilled(ranks, range(4))
    f.events()
    assert decode_ranks(ranks) == [1, 2, 1, 2]


def test_a_report_counts_the_sequences_the_rank_had_taken():
    f, ranks = feeder(3)
    prefilled(ranks, [0])
    f.events()
    # rank 1's report counts the first (its 10 blocks reserved or awaited there), rank 2
    # reports 50 to spare: the second goes to rank 1, 54 to spare
    ranks.events += [Room(1, 54, 1), Room(2, 50, 0)]
    prefilled(ranks, [1])
    f.events()
    # a report that has not counted the second yet: rank 1 has 54 - 10 to spare
    ranks.events += [Room(1, 54, 1)]
    prefilled(ranks, [2])
    f.events()
    assert decode_ranks(ranks) == [1, 1, 2]
