"""Writing segments: exact round trip, metadata, deterministic paths, atomic publish, checks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.changelog import Changelog
from airflow_provider_pgsync.changelog.segments import ROW_GROUP_ROWS
from airflow_provider_pgsync.errors import ChangelogError, ChangelogStorageError, ConfigError
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import ColumnInfo
from tests.changelog.helpers import COLUMNS, bulk, change, changes, drain, table_of

ORDERS = TableRef("public", "orders")
ODD = TableRef("Sales Data", 'Odd "Name"; DROP TABLE x;--')


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def mixed_rows() -> list[dict[str, Any]]:
    return [
        change(0x100, 0, values={"id": "1", "name": "Zoë ✓", "doc": None}),
        change(0x100, 1, values={"id": "2", "name": "", "doc": "line1\nline2\t\\x00ff"}),
        change(0x200, 0, op="U", unchanged=["doc"], values={"id": "1", "name": "n", "doc": None}),
        change(0x200, 1, op="U", old_key={"id": "2"}, values={"id": "20", "name": "NaN", "doc": "{1,NULL}"}),
        change(0x200, 2, op="D", old_key={"id": "20"}, values={"id": None, "name": None, "doc": None}),
        change(0x300, 0, op="T", xid=4_294_967_295),
        change(0x1_0000_0400, 0, xid=0, unchanged=[], values={"id": "-0", "name": " x ", "doc": "Infinity"}),
    ]


def test_round_trip_is_exact(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    rows = mixed_rows()
    info = log.write_segment(ODD, 2, COLUMNS, table_of(rows))
    assert info.table == str(ODD) and info.schema_version == 2 and info.rows == len(rows)
    assert (info.first_commit_lsn, info.last_commit_lsn) == (LSN(0x100), LSN(0x1_0000_0400))
    assert (info.min_xid, info.max_xid) == (0, 4_294_967_295)
    out = list(log.read_changes(ODD, [info]))
    assert [v for v, _ in out] == [2]
    assert drain(iter(out)).to_pylist() == rows
    assert out[0][1].schema.equals(table_of(rows).schema)


def test_metadata(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    info = log.write_segment(ORDERS, 1, COLUMNS, table_of(mixed_rows()), part=3)
    meta = log.segment_metadata(info.path)
    assert meta == {
        "format_version": 1,
        "table": "public.orders",
        "schema_version": 1,
        "columns": [
            {"name": "id", "type_oid": 23, "type_modifier": -1, "is_key": True},
            {"name": "name", "type_oid": 1043, "type_modifier": 68, "is_key": False},
            {"name": "doc", "type_oid": 25, "type_modifier": -1, "is_key": False},
        ],
        "first_commit_lsn": "0/100",
        "last_commit_lsn": "1/400",
        "first_seq": 0,
        "last_seq": 0,
        "min_xid": 0,
        "max_xid": 4_294_967_295,
        "rows": 7,
        "part": 3,
        "xid_bits": 64,
    }
    assert log.segment_info(info.path) == info
    parquet = pq.ParquetFile(tmp_path / info.path)
    assert parquet.metadata.row_group(0).column(0).compression == "ZSTD"


def test_path_is_deterministic_and_rewrite_is_idempotent(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    data = changes([(0x10, 3), (0x20, 2)])
    first = log.write_segment(ORDERS, 1, COLUMNS, data, part=2)
    assert first.path == "public.orders/v0001/0000000000000010-0000000000000020-0002.parquet"
    assert not Path(first.path).is_absolute()
    again = log.write_segment(ORDERS, 1, COLUMNS, data, part=2)
    assert again == first
    assert files(tmp_path) == [first.path]
    assert drain(log.read_changes(ORDERS, [first])).equals(data)


def test_odd_table_names_become_folders(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    info = log.write_segment(ODD, 1, COLUMNS, changes([(5, 1)]))
    assert files(tmp_path) == [info.path]
    assert info.path.count("/") == 2 and (tmp_path / info.path).is_file()
    assert drain(log.read_changes(str(ODD), [info])).num_rows == 1


def test_file_uri(tmp_path: Path) -> None:
    root = tmp_path / "with space"
    log = Changelog(root.as_uri())
    info = log.write_segment(ORDERS, 1, COLUMNS, changes([(5, 2)]))
    assert (root / info.path).is_file()
    assert drain(log.read_changes(ORDERS, [info])).num_rows == 2


def test_bad_uri_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="percent-encode"):
        Changelog("file:///tmp/with space")


def test_no_temporary_files_remain(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    infos = [log.write_segment(ORDERS, 1, COLUMNS, changes([(i, 2)])) for i in range(1, 4)]
    assert files(tmp_path) == sorted(i.path for i in infos)


def test_failed_write_leaves_nothing_at_the_final_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Changelog(str(tmp_path))
    data = changes([(0x10, 2)])
    good = log.write_segment(ORDERS, 1, COLUMNS, data)
    other = changes([(0x10, 1), (0x11, 1)])

    def broken(self: pq.ParquetWriter, table: pa.Table, row_group_size: int | None = None) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        log.write_segment(ORDERS, 1, COLUMNS, other)  # a new path
    with pytest.raises(RuntimeError, match="disk on fire"):
        log.write_segment(ORDERS, 1, COLUMNS, data)  # rewriting the published path
    monkeypatch.undo()
    assert files(tmp_path) == [good.path]
    assert drain(log.read_changes(ORDERS, [good])).equals(data)


def test_killed_writer_never_publishes_a_partial_file(tmp_path: Path) -> None:
    """The process dies after the row groups are written, before the file is closed."""
    script = textwrap.dedent(
        f"""
        import os
        import pyarrow.parquet as pq
        from airflow_provider_pgsync.changelog import Changelog
        from airflow_provider_pgsync.source.names import TableRef
        from tests.changelog.helpers import COLUMNS, bulk

        real = pq.ParquetWriter.write_table

        def dying(self, table, row_group_size=None):
            real(self, table, row_group_size=row_group_size)
            os._exit(17)

        pq.ParquetWriter.write_table = dying
        Changelog({str(tmp_path)!r}).write_segment(TableRef("public", "orders"), 1, COLUMNS, bulk(16, 10, 10))
        """
    )
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=repo, env=env, check=False)
    assert proc.returncode == 17
    final = tmp_path / "public.orders/v0001/0000000000000010-00000000000000A0-0000.parquet"
    assert not final.exists()
    leftovers = files(tmp_path)
    assert len(leftovers) == 1
    assert all(Path(p).name.startswith(".") and p.endswith(".tmp") for p in leftovers)


def test_row_groups_are_bounded(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    info = log.write_segment(ORDERS, 1, COLUMNS, bulk(16, 300, 1000))
    meta = pq.read_metadata(tmp_path / info.path)
    assert meta.num_rows == 300_000 and meta.num_row_groups == 3
    assert all(meta.row_group(i).num_rows <= ROW_GROUP_ROWS for i in range(meta.num_row_groups))


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda t: t.drop_columns(["doc"]), "missing columns \\['doc'\\]"),
        (lambda t: t.set_column(1, "_commit_lsn", t.column(1).cast(pa.int64())), "_commit_lsn is int64"),
        (lambda t: t.select([0, 1, 2, 3, 4, 5, 6, 8, 7, 9]), "columns are in the order"),
        (lambda t: t.slice(0, 0), "at least one change"),
        (lambda t: pa.concat_tables([t.slice(2), t.slice(0, 2)]), "sorted by \\(_commit_lsn, _seq\\)"),
        (lambda t: pa.concat_tables([t, t.slice(3)]), "without repeats"),
    ],
)
def test_data_must_match_the_segment_schema(tmp_path: Path, mangle: Any, message: str) -> None:
    log = Changelog(str(tmp_path))
    with pytest.raises(ChangelogError, match=message) as err:
        log.write_segment(ORDERS, 1, COLUMNS, mangle(changes([(0x10, 2), (0x20, 2)])))
    assert "public.orders" in str(err.value)
    assert files(tmp_path) == []


def test_values_are_checked(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    with pytest.raises(ChangelogError, match="_op holds \\['X'\\]"):
        log.write_segment(ORDERS, 1, COLUMNS, table_of([change(1, 0, op="X")]))
    with pytest.raises(ChangelogError, match="must be 64-bit transaction ids"):
        log.write_segment(ORDERS, 1, COLUMNS, table_of([change(1, 0, xid=-1)]))
    wide = log.write_segment(ORDERS, 1, COLUMNS, table_of([change(1, 0, xid=7 * 2**32 + 5)]))
    assert (wide.min_xid, wide.max_xid, wide.xid_bits) == (7 * 2**32 + 5, 7 * 2**32 + 5, 64)
    nullable = table_of([change(1, 0)]).cast(
        pa.schema([f.with_nullable(True) for f in table_of([change(1, 0)]).schema])
    )
    info = log.write_segment(ORDERS, 1, COLUMNS, nullable)  # nullable flags alone are fine
    assert pq.read_schema(tmp_path / info.path).field("_op").nullable is False
    with_null = nullable.set_column(0, "_op", pa.array([None], pa.string()))
    with pytest.raises(ChangelogError, match="_op must not hold nulls"):
        log.write_segment(ORDERS, 1, COLUMNS, with_null)


def test_arguments_are_checked(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    data = changes([(1, 1)])
    with pytest.raises(ConfigError, match="TableRef"):
        log.write_segment("public.orders", 1, COLUMNS, data)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="part -1"):
        log.write_segment(ORDERS, 1, COLUMNS, data, part=-1)
    with pytest.raises(ConfigError, match="_seq"):
        log.write_segment(ORDERS, 1, [*COLUMNS, ColumnInfo("_seq", 20, -1, False)], data)


def test_unwritable_location_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    log = Changelog(str(tmp_path / "file"))
    with pytest.raises(ChangelogStorageError, match="run capture again") as err:
        log.write_segment(ORDERS, 1, COLUMNS, changes([(1, 1)]))
    assert err.value.retryable


def test_delete_and_created_at(tmp_path: Path) -> None:
    log = Changelog(str(tmp_path))
    a = log.write_segment(ORDERS, 1, COLUMNS, changes([(1, 1)]))
    b = log.write_segment(ORDERS, 1, COLUMNS, changes([(2, 1)]))
    stamps = log.created_at([a.path, b.path, "public.orders/v0001/missing.parquet"])
    assert set(stamps) == {a.path, b.path}
    assert all(abs((datetime.now(UTC) - t).total_seconds()) < 60 for t in stamps.values())
    log.delete_segments([a.path, a.path])
    assert files(tmp_path) == [b.path]
    with pytest.raises(ChangelogError, match="relative"):
        log.delete_segments(["../escape.parquet"])


class _Renamed:
    """A local filesystem that reports another ``type_name``, to drive the other publish paths."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        self._fs = pafs.LocalFileSystem()
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self._fs, name)

    def open_output_stream(self, path: str) -> Any:
        self.calls.append("open_output_stream")
        if self.type_name == "s3":  # object stores have no folders to create first
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return self._fs.open_output_stream(path)


@pytest.mark.parametrize(("kind", "expected_calls"), [("s3", ["open_output_stream"]), ("hdfs", ["move"])])
def test_other_filesystems_publish_whole_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, expected_calls: list[str]
) -> None:
    log = Changelog(str(tmp_path))
    fake = _Renamed(kind)
    log.filesystem = fake
    data = changes([(0x10, 2)])
    info = log.write_segment(ORDERS, 1, COLUMNS, data)
    assert files(tmp_path) == [info.path]
    assert all(call in fake.calls for call in expected_calls)
    assert "move" not in fake.calls or kind != "s3"  # object stores get the final key directly
    assert drain(log.read_changes(ORDERS, [info])).equals(data)

    def broken(self: pq.ParquetWriter, table: pa.Table, row_group_size: int | None = None) -> None:
        raise RuntimeError("network down")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", broken)
    with pytest.raises(RuntimeError):
        log.write_segment(ORDERS, 1, COLUMNS, changes([(0x20, 1)]))
    assert files(tmp_path) == [info.path]
