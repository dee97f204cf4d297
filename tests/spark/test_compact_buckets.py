"""Compaction of lake tables built by hand in one Spark session (``compact_session.py``): a
base laid out by key hash, only the buckets with changes rewritten, the other files left as
they are; a bucket whose rows are all deleted; a TRUNCATE; a rebaseline; a baseline laid out
by key hash; a table without a key. After every compaction the view shows what it showed
before, and what the model holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.apply.lake import run_session

SESSION = Path(__file__).with_name("compact_session.py")


def _steps(lake: Path) -> dict[str, dict[str, Any]]:
    return {s["step"]: s for s in run_session(SESSION, [str(lake)], timeout=900)}


def _kept(step: dict[str, Any]) -> list[str]:
    """Files of the new version that are the previous version's files (same inode and mtime)."""
    before, after = step["files_before"], step["files_after"]
    return [name for name, stat in after.items() if before.get(name) == stat]


def test_compaction_rewrites_only_the_buckets_with_changes(lake: Path) -> None:
    steps = _steps(lake)
    assert steps.pop("hash")["mismatches"] == []  # Spark's hash() and apply's, on the same values
    for name, step in steps.items():
        assert "error" not in step["result"], (name, step["result"])
        assert step["before"] == step["expected"], f"{name}: the view before compaction"
        assert step["after"] == step["expected"], f"{name}: the view after compaction"
        assert step["result"].get("rows", len(step["expected"])) == len(step["expected"]), name

    first = steps["first"]  # a baseline's base: laid out by key hash, every bucket written
    buckets = first["result"]["buckets"]
    assert first["result"]["files_rewritten"] == buckets and not _kept(first)
    assert sorted(b for b, *_ in first["files_after"].values()) == list(range(buckets))

    one = steps["one key"]  # one bucket rewritten, every other file left as it was
    # the bucket's kept rows and its changed keys' rows: a file each at most
    assert one["result"]["buckets_rewritten"] == 1 and one["result"]["files_rewritten"] <= 2
    assert len(_kept(one)) == buckets - 1 == one["result"]["files_kept"]
    assert one["result"]["rows_rewritten"] < len(one["expected"]) / 2

    emptied = steps["bucket emptied"]  # its rows all deleted: the bucket has no file any more
    assert emptied["result"]["files_rewritten"] == 0 and emptied["result"]["buckets_rewritten"] == 1
    assert emptied["emptied"] not in {b for b, *_ in emptied["files_after"].values()}
    others = [n for n, (b, *_) in emptied["files_before"].items() if b != emptied["emptied"]]
    assert sorted(_kept(emptied)) == sorted(others)

    truncated = steps["truncate"]  # nothing of the base stays
    assert truncated["result"]["buckets_rewritten"] == buckets and not _kept(truncated)
    empty = steps["truncated, nothing after"]  # no row: one empty file keeps the columns readable
    assert empty["result"]["rows"] == 0 and len(empty["files_after"]) == 1

    rebaselined, after = steps["rebaselined"], steps["after rebaseline"]
    assert rebaselined["result"]["buckets_rewritten"] == buckets and not _kept(rebaselined)
    assert after["result"]["buckets_rewritten"] == 1 and len(_kept(after)) == buckets - 1

    laid_out = steps["bucketed baseline"]  # laid out by the baseline: no full rewrite
    assert laid_out["result"]["buckets_rewritten"] == 1 and laid_out["result"]["files_rewritten"] == 1
    assert len(_kept(laid_out)) == buckets - 1 == laid_out["result"]["files_kept"]

    # segments apply wrote once the base was laid out: each bucket's task reads its own records
    merged_by = {name: step["result"].get("merged_by") for name, step in steps.items()}
    assert merged_by == {
        "first": "sql",  # a baseline's base
        "one key": "segments",
        "bucket emptied": "segments",
        "truncate": "arrow",  # a TRUNCATE: Spark finds where it cuts
        "truncated, nothing after": "arrow",
        "rebaselined": "sql",
        "after rebaseline": "segments",
        "mixed": "arrow",  # a segment without buckets among them
        "bucketed baseline": "segments",
        "keyless": None,
        "again": None,
    }
    assert steps["mixed"]["result"]["buckets_rewritten"] <= 2

    assert steps["keyless"]["result"]["segments"] == 1 and "buckets" not in steps["keyless"]["result"]
    again = steps["again"]
    assert again["result"]["segments"] == 0 and again["files_after"] == again["files_before"]
