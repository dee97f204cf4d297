"""Splitting a table into ctid block ranges, one per Spark partition (a partitioned table: its leaf
partitions, each whole or in ctid ranges); pure logic (stdlib only)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

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


LEAF_COLUMN = "__pgsync_leaf"
"""The subquery's number of the leaf partition a row comes from (a partitioned table's base query
is a ``UNION ALL`` of its leaves, ``baseline/plan.py``): partitions filter on it, and PostgreSQL
plans each partition's query with the other leaves' branches removed (a constant false qual)."""


def leaf_predicates(
    leaves: Sequence[tuple[str, int, int]], target_bytes: int, *, slots: int = 1, maximum: int = 10_000
) -> list[tuple[str, str]]:
    """One ``(predicate, what it reads)`` per partition over the leaves of a partitioned table.

    ``leaves[i]`` is ``(name, blocks, bytes)`` of the leaf numbered ``i`` in the base query. The
    partition count is ``partition_count`` of their total size; a leaf of at least a partition's
    share is read in ctid ranges of its own (about its share of the count), smaller leaves are
    packed together, whole, into partitions of about that share. Every leaf is read exactly once
    (its last range without an upper bound).
    """
    total = sum(size for _, _, size in leaves)
    count = partition_count(total, target_bytes, slots=slots, maximum=maximum)
    share = total / count
    column = f'"{LEAF_COLUMN}"'
    out: list[tuple[str, str]] = []
    packed: list[int] = []
    packed_bytes = 0

    def flush() -> None:
        nonlocal packed, packed_bytes
        if packed:
            numbers = ", ".join(map(str, packed))
            out.append((f"{column} IN ({numbers})", ", ".join(leaves[i][0] for i in packed)))
            packed, packed_bytes = [], 0

    for i, (name, blocks, size) in enumerate(leaves):
        if share and size >= share:
            ranges = ctid_predicates(blocks, max(1, round(size / share)))
            for k, predicate in enumerate(ranges):
                what = name if len(ranges) == 1 else f"{name} (ctid range {k + 1} of {len(ranges)})"
                out.append((f"{column} = {i}" + ("" if predicate == "TRUE" else f" AND {predicate}"), what))
            continue
        packed.append(i)
        packed_bytes += size
        if share and packed_bytes >= share:
            flush()
    flush()
    return out
