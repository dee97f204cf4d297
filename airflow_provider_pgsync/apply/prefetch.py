"""Reading the next batch of changes while the destination applies the current one.

Apply alternates between the client (reading changelog segments: Parquet decoding and the
merge, in pyarrow, which releases the GIL) and the destination (a PostgreSQL server runs
the batch's statements while the client waits on its socket). ``prefetched`` overlaps the
two: one worker thread takes the next item of an iterator while the caller works on the
current one (so up to two batches are in memory). The items still come in order and one at
a time, so nothing about what a batch holds or when its watermark moves changes; only the
waiting does.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import TypeVar

T = TypeVar("T")

_END = object()


def prefetched(items: Iterator[T]) -> Generator[T, None, None]:
    """The items of ``items`` in order, each next one read in a worker thread while the
    caller holds the current one. An error of ``items`` is raised where the caller would
    have met it; a caller that stops early (or fails) leaves no thread behind: the pending
    read is waited for and ``items`` closed."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgsync-prefetch") as pool:
        pending: Future[object] = pool.submit(next, items, _END)
        try:
            while True:
                item = pending.result()
                if item is _END:
                    return
                pending = pool.submit(next, items, _END)
                yield item  # type: ignore[misc]
        finally:
            # the worker may still be inside items: let it finish before closing them; its
            # result or error goes nowhere (the caller is leaving with its own outcome)
            if not pending.cancel():
                with suppress(Exception):
                    pending.result()
            close = getattr(items, "close", None)
            if close is not None:
                close()
