"""Reading the next item while the caller works on the current one (``apply/prefetch.py``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from airflow_provider_pgsync.apply.prefetch import prefetched


class Source:
    """Yields 0..n-1, recording which thread read each item and whether it was closed."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.readers: list[str] = []
        self.closed = False
        self.gen = self._items()

    def _items(self) -> Iterator[int]:
        try:
            for i in range(self.n):
                self.readers.append(threading.current_thread().name)
                if i == self.fail_at:
                    raise ValueError(f"item {i} is unreadable")
                yield i
        finally:
            self.closed = True


def test_items_come_in_order_each_read_ahead_in_a_worker() -> None:
    source = Source(5)
    taken = []
    for item in prefetched(source.gen):
        taken.append(item)
        # the next item was (being) read while the caller holds this one
        assert len(source.readers) >= min(item + 1, 5)
    assert taken == [0, 1, 2, 3, 4]
    assert all(name.startswith("pgsync-prefetch") for name in source.readers)
    assert source.closed


def test_an_error_of_the_source_is_raised_where_the_caller_meets_it() -> None:
    source = Source(5, fail_at=2)
    taken = []
    with pytest.raises(ValueError, match="item 2 is unreadable"):
        for item in prefetched(source.gen):
            taken.append(item)
    assert taken == [0, 1]


def test_a_caller_that_stops_early_closes_the_source_and_leaves_no_thread() -> None:
    before = {t.name for t in threading.enumerate()}
    source = Source(100)
    items = prefetched(source.gen)
    assert next(items) == 0
    items.close()
    assert source.closed
    assert len(source.readers) <= 2  # at most the item read ahead, not the rest
    assert {t.name for t in threading.enumerate()} - before == set()


def test_a_caller_that_fails_closes_the_source() -> None:
    source = Source(100)
    with pytest.raises(RuntimeError, match="the destination refused"):
        for _ in prefetched(source.gen):
            raise RuntimeError("the destination refused")
    assert source.closed
