"""Lake publishes are compare-and-set (DESIGN §2 rule 11), whatever the metastore: the publish
step itself refuses a generation decided from one that is no longer current and a segment of a
lineage that is no longer the table's; apply's check finds a lake table whose files were
removed. Files and folders written are private."""

from __future__ import annotations

import re
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
from airflow_provider_pgsync.destinations.lake_files import LakeFiles
from airflow_provider_pgsync.destinations.lake_tables import LakeTableMeta
from airflow_provider_pgsync.errors import DestinationDivergedError, PublishConflictError
from airflow_provider_pgsync.testing.destination_kit import Change, change_batch
from tests.support.lake_changes import KEYED, TABLE, empty_base


def _next(meta: LakeTableMeta, base: str) -> LakeTableMeta:
    return replace(meta, number=meta.number + 1, base=base)


def test_a_generation_decided_from_a_replaced_one_is_refused(tmp_path: Path) -> None:
    lake = empty_base(tmp_path, KEYED, ("id",))
    files = LakeFiles(lake)
    first = files.current(TABLE)
    assert first is not None
    second = _next(first, f"{first.base}-compacted")
    files.publish_generation(TABLE, second, first)
    # a compaction that merged the first generation, meanwhile replaced by the second
    with pytest.raises(PublishConflictError, match=r"decided from generation 1 .* at generation 2 .* now"):
        files.publish_generation(TABLE, _next(first, f"{first.base}-stale"), first)
    # a rebaseline published a new lineage meanwhile: the same
    rebaselined = replace(_next(second, f"{first.base}-v2"), lineage="v2")
    files.publish_generation(TABLE, rebaselined, second)
    with pytest.raises(PublishConflictError, match=r"\(lineage v1\).*\(lineage v2\)"):
        files.publish_generation(TABLE, _next(second, f"{first.base}-stale"), second)
    assert files.generations(TABLE) == [1, 2, 3]
    current = files.current(TABLE)
    assert current is not None and current.lineage == "v2"


def test_two_writers_deciding_from_one_generation_publish_one(tmp_path: Path) -> None:
    """The check and the write race: a writer that read the table before another published its
    generation still cannot publish the same number (the meta file is linked into place)."""
    lake = empty_base(tmp_path, KEYED, ("id",))
    first = LakeFiles(lake).current(TABLE)
    assert first is not None

    class Late(LakeFiles):  # read the table before the other writer's publish
        def current(self, table):  # type: ignore[no-untyped-def]
            return first

    LakeFiles(lake).publish_generation(TABLE, _next(first, "a"), first)
    with pytest.raises(PublishConflictError, match="generation 2 was published by another writer"):
        Late(lake).publish_generation(TABLE, _next(first, "b"), first)
    current = LakeFiles(lake).current(TABLE)
    assert current is not None and current.base == "a"
    assert not [p for p in Path(lake.table_dir(TABLE), "meta").iterdir() if p.name.startswith("_")]


def test_a_segment_of_a_replaced_lineage_is_refused(tmp_path: Path) -> None:
    lake = empty_base(tmp_path, KEYED, ("id",))
    changes = LakeChanges(lake)
    changes.open_table(TABLE, KEYED, 0)
    batch = change_batch(KEYED, [Change("I", {"id": "1", "note": "a", "doc": "d"})], first_lsn=100)
    changes.apply(TABLE, KEYED, batch, (100, 1))
    files = LakeFiles(lake)
    first = files.current(TABLE)
    assert first is not None
    files.publish_generation(TABLE, replace(_next(first, f"{first.base}-v2"), lineage="v2"), first)
    with pytest.raises(PublishConflictError, match="written for lineage v1, but the table holds lineage v2"):
        changes.apply(TABLE, KEYED, change_batch(KEYED, [Change("D", {"id": "1"})], first_lsn=200), (200, 1))
    folder = Path(files.segments_dir(TABLE, first))
    assert sorted(p.name for p in folder.iterdir()) == ["0000000000000064-0000000001.parquet"]


def test_apply_finds_a_lake_table_whose_files_were_removed(tmp_path: Path) -> None:
    lake = empty_base(tmp_path, KEYED, ("id",))
    changes = LakeChanges(lake)
    meta = LakeFiles(lake).current(TABLE)
    assert meta is not None
    Path(meta.base, "_SUCCESS").touch()
    changes.verify(TABLE, "v1")
    with pytest.raises(DestinationDivergedError, match="holds baseline v1, not v0"):
        changes.verify(TABLE, "v0")
    shutil.rmtree(meta.base)
    with pytest.raises(DestinationDivergedError, match=f"its base {re.escape(meta.base)} .* is gone"):
        changes.verify(TABLE, "v1")
    shutil.rmtree(Path(lake.table_dir(TABLE)))
    with pytest.raises(DestinationDivergedError, match="has no generation"):
        changes.verify(TABLE, "v1")


def test_what_apply_writes_in_a_lake_is_private(tmp_path: Path) -> None:
    lake = empty_base(tmp_path / "w", KEYED, ("id",))
    changes = LakeChanges(lake)
    changes.open_table(TABLE, KEYED, 0)
    batch = change_batch(KEYED, [Change("I", {"id": "1", "note": "a", "doc": "d"})], first_lsn=100)
    changes.apply(TABLE, KEYED, batch, (100, 1))
    written = [p for p in Path(lake.table_dir(TABLE)).rglob("*") if "base" not in p.parts]
    assert any(p.suffix == ".parquet" for p in written) and any(p.suffix == ".json" for p in written)
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, f"{path} is readable by others"
