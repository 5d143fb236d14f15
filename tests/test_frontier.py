"""A device's front over its run points and its readings at a level of tokens/s per user
(docs/frontier.md, "The front and its readings"), on hand-made points."""

import math

import pytest
from hypothesis import given, strategies as st

from harness.analysis.frontier import Point, Reading, envelope, per, ratio, read


def labels(front):
    return [p.label for p in front.points]


def test_the_envelope_drops_dominated_points_and_sorts_by_interactivity():
    points = [Point(10, 100, "a"), Point(20, 80, "b"), Point(15, 70, "under b"),
              Point(40, 30, "c"), Point(5, 90, "under a")]
    assert labels(envelope(points)) == ["a", "b", "c"]


def test_ties_one_strictly_better_drops_the_other_equal_points_stay():
    # equal x, lower y: beaten; equal y, lower x: beaten; identical: neither beats the other
    points = [Point(10, 100, "a"), Point(10, 90, "below a"), Point(8, 100, "left of a"),
              Point(20, 50, "b"), Point(20, 50, "b again")]
    assert labels(envelope(points)) == ["a", "b", "b again"]


def test_one_point_is_its_own_front():
    assert labels(envelope([Point(12.5, 300, "only")])) == ["only"]


def test_ineligible_points_are_left_off_with_their_reasons():
    points = [Point(10, 100, "a"), Point(50, 500, "no window", False, "still filling"),
              Point(30, math.nan, "nan")]
    front = envelope(points)
    assert labels(front) == ["a"]  # the ineligible point would have beaten it
    assert [(p.label, p.reason) for p in front.left_off][0] == ("no window", "still filling")
    assert front.left_off[1].label == "nan" and "not a number" in front.left_off[1].reason


FRONT = envelope([Point(10, 100, "slow"), Point(30, 60, "mid"), Point(50, 20, "fast")])


def test_a_level_between_two_points_reads_the_line_between_them():
    r = read(FRONT, 20)  # halfway from (10, 100) to (30, 60)
    assert r.found and r.value == pytest.approx(80)
    assert (r.low, r.high) == (60, 100)
    assert (r.left.label, r.left.x, r.left.y) == ("slow", 10, 100)
    assert (r.right.label, r.right.x, r.right.y) == ("mid", 30, 60)
    r = read(FRONT, 45)  # three quarters from (30, 60) to (50, 20)
    assert r.value == pytest.approx(30) and (r.low, r.high) == (20, 60)


def test_a_level_on_a_point_reads_that_point_with_a_zero_width_interval():
    for level, y, label in ((10, 100, "slow"), (30, 60, "mid"), (50, 20, "fast")):
        r = read(FRONT, level)
        assert (r.value, r.low, r.high) == (y, y, y)
        assert r.left.label == r.right.label == label


def test_a_level_outside_the_front_is_never_extrapolated():
    below, above = read(FRONT, 9.99), read(FRONT, 82.1)
    assert not below.found and below.left is None and below.right is None
    assert below.reason == "below the slowest point, 10.0 tok/s per user (slow)"
    assert not above.found and math.isnan(above.low) and math.isnan(above.high)
    assert above.reason == "above the fastest point, 50.0 tok/s per user (fast)"
    assert not read(envelope([]), 10).found and "empty" in read(envelope([]), 10).reason


def test_a_ratio_carries_the_interval_of_its_readings():
    a = Reading(20, 80, 60, 100)
    b = Reading(20, 40, 30, 50)
    r = ratio(a, b)
    assert r.value == 2 and (r.low, r.high) == (60 / 50, 100 / 30)
    assert r.low <= r.value <= r.high


def test_no_ratio_where_a_reading_has_no_value():
    r = ratio(read(FRONT, 20), read(FRONT, 82.1))
    assert math.isnan(r.value) and math.isnan(r.low) and math.isnan(r.high)
    assert "above the fastest point, 50.0 tok/s per user" in r.reason


def test_per_kw_divides_each_point_and_leaves_off_those_without_a_figure():
    points = [Point(10, 100, "a"), Point(30, 60, "b"), Point(50, 20, "c")]
    scaled = per(points, [2.0, 0.5, math.nan], "power")
    assert [p.y for p in scaled[:2]] == [50, 120]
    assert not scaled[2].eligible and scaled[2].reason == "no power"
    assert labels(envelope(scaled)) == ["b"]  # (30, 120) now beats (10, 50)


coordinate = st.floats(0.01, 1e4, allow_nan=False)
points = st.lists(st.builds(Point, coordinate, coordinate, st.just("p")), min_size=1,
                  max_size=30)


@given(points)
def test_the_envelope_is_monotone_and_covers_every_point(points):
    front = envelope(points).points
    assert front
    for a, b in zip(front, front[1:]):
        assert (a.x < b.x and a.y > b.y) or (a.x, a.y) == (b.x, b.y)
    for p in points:
        assert any(q.x >= p.x and q.y >= p.y for q in front)


@given(points, st.floats(0.01, 1e4))
def test_a_reading_lies_within_its_interval_and_under_no_point(points, level):
    r = read(envelope(points), level)
    if r.found:
        assert r.low <= r.value <= r.high
        assert r.left.x <= level <= r.right.x
        # no measured point at or beyond the level reaches above the reading's interval
        assert all(p.y <= r.high for p in points if p.x >= level)
