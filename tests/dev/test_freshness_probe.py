"""The pure part of ``dev/bench freshness``'s probe: when a destination has passed a sampled commit."""

from __future__ import annotations

import threading

import pytest
from freshness_load import CommitGate
from freshness_probe import Sample, Tracker, passed, percentiles

ORDERS, EVENTS = "public.orders", "public.events"


def test_a_sample_passes_when_every_table_it_changed_is_at_or_past_its_lsn() -> None:
    sample = Sample(100, frozenset({ORDERS, EVENTS}), 0.0)
    assert not passed(sample, {ORDERS: 100, EVENTS: 99})
    assert not passed(sample, {ORDERS: 100, EVENTS: None})
    assert passed(sample, {ORDERS: 100, EVENTS: 250})
    # a table the sample did not change never holds it back
    assert passed(Sample(100, frozenset({ORDERS}), 0.0), {ORDERS: 120, EVENTS: 3})


def test_tracker_records_freshness_per_destination_and_skips_uncounted_samples() -> None:
    tracker = Tracker(("lake", "replica"))
    first, second = Sample(0x100, frozenset({ORDERS}), 10.0), Sample(0x200, frozenset({EVENTS}), 11.0)
    marker = Sample(0x300, frozenset({ORDERS, EVENTS}), 12.0)
    for sample in (first, second, marker):
        tracker.add(sample)
    keep = lambda s: s is not marker  # noqa: E731
    tracker.observe({"lake": {ORDERS: 0x100, EVENTS: None}, "replica": {}}, 15.0, keep=keep)
    assert tracker.fresh == {"lake": [5.0], "replica": []}
    tracker.observe({"lake": {ORDERS: 0x300, EVENTS: 0x300}, "replica": {ORDERS: 0xFF}}, 20.0, keep=keep)
    assert tracker.fresh == {"lake": [5.0, 9.0], "replica": []}
    assert not tracker.has_passed(marker)
    tracker.observe({"lake": {}, "replica": {ORDERS: 0x300, EVENTS: 0x300}}, 21.0, keep=keep)
    assert tracker.fresh == {"lake": [5.0, 9.0], "replica": [11.0, 10.0]}
    assert tracker.has_passed(marker)
    assert tracker.waiting == {"lake": [], "replica": []}


def test_percentiles() -> None:
    assert percentiles([]) == {}
    assert percentiles([4.0]) == {50: 4.0, 95: 4.0, 99: 4.0}
    found = percentiles(float(v) for v in range(1, 102))
    assert found == {50: pytest.approx(51.0), 95: pytest.approx(96.0), 99: pytest.approx(100.0)}


def test_commit_gate_exclusive_waits_for_the_shared_holders() -> None:
    gate = CommitGate()
    events: list[str] = []
    shared_in, release_shared, exclusive_in = threading.Event(), threading.Event(), threading.Event()

    def shared_holder() -> None:
        with gate.shared():
            shared_in.set()
            release_shared.wait(10)
            events.append("shared done")

    def exclusive_holder() -> None:
        with gate.exclusive():
            events.append("exclusive")
            exclusive_in.set()

    first = threading.Thread(target=shared_holder)
    first.start()
    assert shared_in.wait(10)
    second = threading.Thread(target=exclusive_holder)
    second.start()
    assert not exclusive_in.wait(0.2)  # it must wait for the shared holder
    release_shared.set()
    assert exclusive_in.wait(10)
    first.join(10)
    second.join(10)
    assert events == ["shared done", "exclusive"]
