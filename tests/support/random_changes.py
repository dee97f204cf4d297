"""Random change batches of a table without a key (test-only)."""

from __future__ import annotations

import random

from airflow_provider_pgsync.testing.destination_kit import Change

Row = dict[str, str | None]


def row(a: str | None, b: str | None = "x", n: str | None = "1.0", j: str | None = '{"k": 1}') -> Row:
    return {"a": a, "b": b, "n": n, "j": j}


def insert(r: Row) -> Change:
    return Change("I", r)


def delete(r: Row) -> Change:
    return Change("D", r)


def update(old: Row, new: Row, unchanged: tuple[str, ...] = ()) -> Change:
    return Change("U", new, old_key=old, unchanged=unchanged)


def random_changes(seed: int, length: int) -> list[Change]:
    """Changes a source could send: few distinct values (many identical rows), NULLs, old rows
    that exist when their change comes, and an occasional TRUNCATE."""
    rng = random.Random(seed)
    values = [
        row(a, b, n, j)
        for a in ("1", "2", None)
        for b in ("x", "", None)
        for n, j in (("1.0", '{"k": 1}'), ("1.00", '{"k":1}'), (None, None))
    ]
    rows: list[Row] = []
    out: list[Change] = []
    for _ in range(length):
        choice = rng.random()
        if not rows or choice < 0.45:
            new = rng.choice(values)
            rows.append(new)
            out.append(insert(new))
        elif choice < 0.7:
            old = rows.pop(rng.randrange(len(rows)))
            out.append(delete(old))
        elif choice < 0.98:
            i = rng.randrange(len(rows))  # rows of NULLs only too
            old, new = rows[i], rng.choice(values)
            unchanged = ("j",) if rng.random() < 0.2 else ()
            rows[i] = {**new, "j": old["j"]} if unchanged else new
            out.append(update(old, rows[i], unchanged))
        else:
            rows.clear()
            out.append(Change("T"))
    return out
