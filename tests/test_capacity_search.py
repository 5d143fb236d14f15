"""The capacity search (harness/capacity_search.py) on synthetic probes: a known threshold
is bracketed within the resolution, from above or below, and the search ends at its
bounds when the target is met everywhere or nowhere."""

import math

import pytest

from harness.capacity_search import STEPS, bounds, search

CAPACITY = 37.3  # req/s: the synthetic probe meets its target at this rate and below


def threshold(rate):
    return rate <= CAPACITY, f"run at {rate:g}"


@pytest.mark.parametrize("start", [0.5, 10.0, CAPACITY, 40.0, 5000.0])
@pytest.mark.parametrize("resolution", [0.05, 0.01])
def test_a_monotone_threshold_is_bracketed_within_the_resolution(start, resolution):
    found = search(threshold, start, resolution)
    assert found.found
    assert found.low <= CAPACITY < found.high
    assert found.high / found.low <= 1 + resolution
    assert found.probes[0].rate == start
    assert found.at(found.low).met and found.at(found.low).result == f"run at {found.low:g}"
    assert not found.at(found.high).met
    # bracketing takes ceil(|log2(CAPACITY / start)|) + 1 probes at most; bisection halves
    # log2(high / low) from 1 down to log2(1 + resolution)
    bracket = math.ceil(abs(math.log2(CAPACITY / start))) + 1
    bisect = math.ceil(math.log2(1 / math.log2(1 + resolution)))
    assert len(found.probes) <= bracket + 1 + bisect


def test_every_rate_that_met_lies_below_every_rate_that_missed():
    found = search(threshold, 3.0, 0.001)
    met = [p.rate for p in found.probes if p.met]
    missed = [p.rate for p in found.probes if not p.met]
    assert max(met) == found.low < found.high == min(missed)


def test_a_target_missed_everywhere_ends_at_the_lowest_rate():
    found = search(lambda rate: (False, None), 64.0, 0.05)
    assert not found.found and found.low is None
    assert [p.rate for p in found.probes] == [64.0 / 2 ** k for k in range(STEPS + 1)]
    assert found.high == 64.0 / 2 ** STEPS


def test_a_target_met_everywhere_ends_at_the_highest_rate():
    found = search(lambda rate: (True, None), 2.0, 0.05, highest=9.0)
    assert not found.found and found.high is None
    assert [p.rate for p in found.probes] == [2.0, 4.0, 8.0, 9.0]
    assert found.low == 9.0


def test_the_bounds_clamp_the_rates_probed():
    found = search(threshold, 100.0, 0.05, lowest=60.0)
    assert [p.rate for p in found.probes] == [100.0, 60.0]
    assert found.low is None and found.high == 60.0


@pytest.mark.parametrize("lowest, highest", [(50.0, None), (None, 20.0), (0.0, None),
                                             (None, math.inf)])
def test_bounds_that_do_not_hold_the_start_are_refused(lowest, highest):
    with pytest.raises(ValueError, match="must hold the starting rate 40"):
        bounds(40.0, lowest, highest)


def test_a_resolution_must_be_positive():
    with pytest.raises(ValueError, match="resolution > 0"):
        search(threshold, 40.0, 0.0)
