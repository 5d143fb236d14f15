"""The capacity search (harness/sweeps/capacity_search.py) on synthetic probes: a known threshold
is bracketed within the resolution, from above or below, and the search ends at its
bounds when the target is met everywhere or nowhere, at its probe limit, and when the
bracket's ends are adjacent doubles (no rate is probed twice); the integer search (a closed
loop's requests in flight) probing whole numbers only, exact at adjacent ends."""

import math

import pytest

from harness.sweeps.capacity_search import (
    MAX_PROBES,
    MIN_RESOLUTION,
    STEPS,
    bounds,
    integer_bounds,
    search,
    search_integers,
)

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


def test_a_resolution_finer_than_a_double_ends_at_adjacent_rates_never_probing_one_twice():
    # 1 + 1e-17 == 1: the bracket never gets within it; once its ends are adjacent doubles
    # the geometric mean is one of them, and the search ends instead of probing it again
    found = search(threshold, 40.0, 1e-17, max_probes=1000)
    rates = [p.rate for p in found.probes]
    assert len(rates) == len(set(rates)) < 100
    assert found.found and not found.out_of_probes
    assert found.low == CAPACITY and found.high == math.nextafter(CAPACITY, math.inf)


@pytest.mark.parametrize("start, resolution", [(2.0, 1e-17), (2.0, 0.05), (5000.0, 0.05),
                                               (40.0, 0.1)])
def test_the_search_stops_after_max_probes_and_says_so(start, resolution):
    found = search(threshold, start, resolution, max_probes=3)
    assert len(found.probes) == 3 and found.out_of_probes
    met = [p.rate for p in found.probes if p.met]
    missed = [p.rate for p in found.probes if not p.met]
    assert found.low == max(met, default=None) and found.high == min(missed, default=None)


def test_a_search_that_ends_on_its_last_probe_is_not_out_of_probes():
    probes = len(search(threshold, 40.0, 0.05).probes)
    found = search(threshold, 40.0, 0.05, max_probes=probes)
    assert len(found.probes) == probes and not found.out_of_probes


@pytest.mark.parametrize("capacity", [1e-3, 0.09, 1.0, 37.3, 99.9, 100.1, 1e3, 1e5, 1e6])
def test_the_default_probe_limit_holds_any_search_within_the_default_bounds(capacity):
    found = search(lambda rate: (rate <= capacity, None), 100.0, MIN_RESOLUTION)
    assert not found.out_of_probes and len(found.probes) <= MAX_PROBES


def test_rates_near_the_largest_double_are_bisected_without_overflow():
    found = search(lambda rate: (rate <= 1e300, None), 1e299, 0.05, highest=1e305)
    assert found.found and found.low <= 1e300 < found.high <= 1.05 * found.low


def test_a_probe_limit_must_be_at_least_one():
    with pytest.raises(ValueError, match="max_probes >= 1"):
        search(threshold, 40.0, 0.05, max_probes=0)


# The integer search (a closed loop's requests in flight): the same bracket and bisection
# over whole numbers, exact where its ends are adjacent.
IN_FLIGHT = 37  # the synthetic probe meets its target at this concurrency and below


def in_flight(n):
    assert isinstance(n, int)
    return n <= IN_FLIGHT, f"run at {n}"


@pytest.mark.parametrize("start", [1, 4, IN_FLIGHT, 38, 500])
def test_an_integer_threshold_is_found_exactly_with_integer_probes(start):
    found = search_integers(in_flight, start, 1e-6)
    assert found.found and not found.out_of_probes
    assert (found.low, found.high) == (IN_FLIGHT, IN_FLIGHT + 1)
    rates = [p.rate for p in found.probes]
    assert rates[0] == start and all(isinstance(r, int) for r in rates)
    assert len(rates) == len(set(rates))
    met = [p.rate for p in found.probes if p.met]
    missed = [p.rate for p in found.probes if not p.met]
    assert max(met) == found.low < found.high == min(missed)


def test_the_integer_bracket_doubles_then_bisects():
    assert [p.rate for p in search_integers(in_flight, 4, 1e-6).probes] == \
        [4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert [p.rate for p in search_integers(in_flight, 300, 1e-6).probes] == \
        [300, 150, 75, 37, 56, 46, 41, 39, 38]


def test_the_integer_search_stops_within_its_resolution():
    found = search_integers(lambda n: (n <= 1000, None), 64, 0.05)
    assert found.found and found.low <= 1000 < found.high
    assert found.high / found.low <= 1.05 and found.high - found.low > 1


def test_halving_ends_at_one_request_in_flight():
    found = search_integers(lambda n: (False, None), 10, 0.05)
    assert [p.rate for p in found.probes] == [10, 5, 2, 1] and found.low is None


def test_integer_bounds_default_and_clamp():
    assert integer_bounds(4) == (1, 4 * 2 ** STEPS)
    found = search_integers(lambda n: (True, None), 3, 0.05, highest=20)
    assert [p.rate for p in found.probes] == [3, 6, 12, 20] and found.high is None


@pytest.mark.parametrize("lowest, highest", [(0, None), (1.5, None), (5, None), (None, 3),
                                             (None, 10.5), (None, math.inf), (math.nan, None)])
def test_integer_bounds_that_are_not_whole_or_do_not_hold_the_start_are_refused(lowest,
                                                                                 highest):
    with pytest.raises(ValueError, match="requests in flight to probe must hold the starting 4"):
        integer_bounds(4, lowest, highest)
