"""The lake's swap (``spark/lake.py``) step by step in one Spark session (``swap_session.py``):
the catalog's early start and its rehearsal of the swap change nothing a reader sees; the swap
shows the new base at once; the view reads base plus segments after a rebaseline and after a
compaction; a failed first baseline leaves no changes table behind (nor a new lake's database)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.apply.lake import run_session

# the subject is the swap with an embedded Derby metastore that this process holds alone (the
# catalog's early start): not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit

SESSION = Path(__file__).with_name("swap_session.py")


def test_readers_see_the_old_state_until_the_swap_then_the_new(lake: Path) -> None:
    seen: dict[str, Any] = run_session(SESSION, [str(lake)], timeout=900)

    # a new lake whose first baseline fails: the early start made its database and the changes
    # table, and the failure takes both away (the catalog as it was)
    during, discarded = seen["a new lake: during the copy"], seen["a new lake: discarded"]
    assert during["database"] and [t for t in during["tables"] if t.startswith("public__never__changes_")]
    assert not discarded["database"] and discarded["tables"] == []

    first_before, first_after = seen["first: before the swap"], seen["first: after the swap"]
    # a new lake: the early start made the database and the lineage's changes table, nothing a
    # reader sees: no base, no view
    assert first_before["view"] is None and first_before["base"] is None
    assert [t for t in first_before["tables"] if t.startswith("public__items__changes_")]
    assert "public__items" not in first_before["tables"]
    assert first_after["view"] == [[1, "a"], [2, "b"]]
    assert first_after["base"].rstrip("/").endswith(first_after["location"].rsplit("/", 1)[-1])
    assert seen["first: a segment"]["view"] == [[1, "a"], [2, "b2"], [3, "c"]]

    re_before, re_after = seen["rebaseline: before the swap"], seen["rebaseline: after the swap"]
    # the rehearsal set the base table to the location it had and left the view as it was
    assert re_before["view"] == [[1, "a"], [2, "b2"], [3, "c"]]
    assert re_before["base"] == first_after["base"]
    assert re_after["view"] == [[1, "r1"], [5, "r5"]]  # the old lineage's segment is gone with it
    assert re_after["base"] != first_after["base"]
    assert re_after["base"].rstrip("/").endswith(re_after["location"].rsplit("/", 1)[-1])
    # the new lineage's changes table, and the previous one's for queries still reading it
    lineages = [t for t in re_after["tables"] if t.startswith("public__items__changes_")]
    assert len(lineages) == 2 and lineages != [t for t in first_after["tables"] if "__changes_" in t]

    expected = [[5, "r5"], [6, "r6"]]
    assert seen["rebaseline: a segment"]["view"] == expected
    assert "error" not in seen["compacted"]["result"], seen["compacted"]["result"]
    assert seen["compacted"]["view"] == expected
    assert seen["compacted: a segment"]["view"] == [*expected, [7, "r7"]]

    during, discarded = seen["failed: during the copy"], seen["failed: discarded"]
    assert [t for t in during["tables"] if t.startswith("public__never__changes_")]
    assert not [t for t in discarded["tables"] if t.startswith("public__never")]
    assert discarded["database"], "a database other tables use stays"
