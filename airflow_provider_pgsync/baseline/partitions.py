"""Splitting a table into ctid block ranges, one per Spark partition; pure logic (stdlib only)."""

from __future__ import annotations

import itertools
import math

from airflow_provider_pgsync.errors import ConfigError

CTID_COLUMN = "__pgsync_ctid"
"""The subquery's name of ``ctid``: partitions filter on it, the job never selects it."""


SPREAD_BYTES = 32 * 1024 * 1024


def partition_count(table_bytes: int, target_bytes: int, *, slots: int = 1, maximum: int = 10_000) -> int:
    """How many partitions read a table of ``table_bytes`` in pieces of at most about ``target_bytes``.

    The count is rounded up to a multiple of ``slots`` (the cluster's task slots, Spark's
    default parallelism) so the last round of tasks keeps every slot busy; a table of at
    least ``SPREAD_BYTES`` is spread over every slot.
    """
    if target_bytes <= 0:
        raise ConfigError(f"the target partition size must be positive, not {target_bytes}")
    count = max(1, math.ceil(table_bytes / target_bytes))
    if count == 1 and table_bytes >= SPREAD_BYTES:
        count = slots  # worth spreading over every slot even below the target size
    if count > 1 and slots > 1:
        count = math.ceil(count / slots) * slots
    return max(1, min(maximum, count))


def ctid_predicates(blocks: int, partitions: int) -> list[str]:
    """One ``WHERE`` predicate per partition, covering every block exactly once.

    The first range has no lower bound and the last no upper bound, so tuples of blocks
    added after the size was read are still read (the snapshot decides what is visible).
    """
    partitions = max(1, min(partitions, blocks))
    if partitions == 1:
        return ["TRUE"]
    bounds = [blocks * i // partitions for i in range(1, partitions)]
    column = f'"{CTID_COLUMN}"'
    predicates = [f"{column} < '({bounds[0]},0)'::tid"]
    predicates += [
        f"{column} >= '({lo},0)'::tid AND {column} < '({hi},0)'::tid" for lo, hi in itertools.pairwise(bounds)
    ]
    predicates.append(f"{column} >= '({bounds[-1]},0)'::tid")
    return predicates
