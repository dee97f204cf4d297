"""Net effects of change batches equal applying the changes one by one (the kit's model)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_pgsync.apply.net import NetStep, Truncate, bulk_net, is_keyed, net_steps, row_changes
from airflow_provider_pgsync.testing.destination_kit import Change, Model, change_batch, column

COLUMNS = [column("id", 23, key=True), column("a", 25), column("toast", 25)]
Row = dict[str, str | None]


def valid_stream(seed: int, length: int, *, plain: bool = False) -> list[Change]:
    """Random changes a real source could send: updates and deletes only of existing keys;
    ``plain``: no key change, unchanged TOAST or TRUNCATE (the batches ``bulk_net`` takes)."""
    rng = random.Random(seed)
    rows: dict[str, Row] = {}
    out: list[Change] = []
    for n in range(length):
        choice = rng.random()
        if not rows or choice < 0.3:
            key = str(rng.randrange(12))
            if key in rows:
                continue
            row = {"id": key, "a": f"a{n}", "toast": rng.choice([None, f"t{n}"])}
            rows[key] = row
            out.append(Change("I", row))
        elif choice < 0.75:
            old = rng.choice(sorted(rows))
            new = str(rng.randrange(12)) if rng.random() < 0.3 and not plain else old
            if new != old and new in rows:
                continue
            unchanged = ("toast",) if rng.random() < 0.6 and not plain else ()
            row = {"id": new, "a": f"u{n}", "toast": rows[old]["toast"] if unchanged else f"t{n}"}
            del rows[old]
            rows[new] = row
            out.append(Change("U", row, old_key={"id": old} if new != old else None, unchanged=unchanged))
        elif choice < 0.95 or plain:
            key = rng.choice(sorted(rows))
            del rows[key]
            out.append(Change("D", {"id": key}))
        else:
            rows.clear()
            out.append(Change("T"))
    return out


def apply_steps(start: dict[str, Row], steps: list[NetStep | Truncate]) -> dict[str, Row]:
    """What a destination does with net steps, in memory (as ``PostgresDestination`` does in SQL)."""
    table = {k: dict(v) for k, v in start.items()}
    for step in steps:
        if isinstance(step, Truncate):
            table.clear()
            continue
        before = {k: dict(v) for k, v in table.items()}
        for key in step.deletes:
            table.pop(key[0], None)
        for key, state in step.present():
            if state.carry_from is not None:
                origin = before[state.carry_from[0]]
                table[key[0]] = {**{n: origin[n] for n in state.unchanged}, **state.values}
            elif state.unchanged:
                assert key[0] in table, f"in-place update of missing row {key}"
                table[key[0]].update(state.values)
            else:
                table[key[0]] = dict(state.values)
    return table


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10**9), length=st.integers(1, 40), cut=st.integers(1, 40))
def test_net_steps_equal_change_by_change(seed: int, length: int, cut: int) -> None:
    stream = valid_stream(seed, length)
    model = Model(COLUMNS)
    table: dict[str, Row] = {}
    for start in range(0, len(stream), cut):
        part = stream[start : start + cut]
        table = apply_steps(table, net_steps(COLUMNS, change_batch(COLUMNS, part, first_lsn=16)))
        for change in part:
            model.apply(change)
    assert sorted(table.values(), key=lambda r: int(r["id"] or 0)) == sorted(
        model.rows, key=lambda r: int(r["id"] or 0)
    )


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10**9), length=st.integers(1, 40), cut=st.integers(1, 40))
def test_bulk_net_equals_change_by_change(seed: int, length: int, cut: int) -> None:
    """A bulk net effect applied as the PostgreSQL destination does (delete and update only
    rows it holds, insert only rows it lacks) and as the lake does (delete, replace by key)
    gives the model's rows."""
    stream = valid_stream(seed, length, plain=True)
    model = Model(COLUMNS)
    table: dict[str | None, Row] = {}
    lake: dict[str | None, Row] = {}
    for start in range(0, len(stream), cut):
        part = stream[start : start + cut]
        net = bulk_net(COLUMNS, change_batch(COLUMNS, part, first_lsn=16))
        assert net is not None
        for key in net.deletes.column("id").to_pylist():
            assert table.pop(key, None) is not None, f"deletes {key}, which the destination lacks"
        for row in net.updates.to_pylist():
            assert row["id"] in table, f"updates {row['id']}, which the destination lacks"
            table[row["id"]] = row
        for row in net.inserts.to_pylist():
            assert row["id"] not in table, f"inserts {row['id']}, which the destination holds"
            table[row["id"]] = row
        for key in net.deletes.column("id").to_pylist():
            lake.pop(key, None)
        lake.update((row["id"], row) for row in net.updates.to_pylist() + net.inserts.to_pylist())
        for change in part:
            model.apply(change)
    assert table == lake == {row["id"]: row for row in model.rows}


@pytest.mark.parametrize(
    "change",
    [
        Change("T"),
        Change("U", {"id": "2", "a": "x", "toast": None}, old_key={"id": "1"}),
        Change("U", {"id": "1", "a": "x", "toast": None}, unchanged=("toast",)),
    ],
)
def test_bulk_net_leaves_truncate_key_change_and_unchanged_toast_to_net_steps(change: Change) -> None:
    plain = Change("I", {"id": "1", "a": "a", "toast": "t"})
    assert bulk_net(COLUMNS, change_batch(COLUMNS, [plain], first_lsn=16)) is not None
    assert bulk_net(COLUMNS, change_batch(COLUMNS, [plain, change], first_lsn=16)) is None


def test_unchanged_toast_is_carried_inside_a_batch_and_left_in_place_otherwise() -> None:
    changes = [
        Change("I", {"id": "1", "a": "x", "toast": "big"}),
        Change("U", {"id": "1", "a": "y", "toast": None}, unchanged=("toast",)),
        Change("U", {"id": "2", "a": "z", "toast": None}, unchanged=("toast",)),
    ]
    [step] = net_steps(COLUMNS, change_batch(COLUMNS, changes, first_lsn=16))
    assert isinstance(step, NetStep)
    assert step.final[("1",)].values == {"id": "1", "a": "y", "toast": "big"}
    assert not step.final[("1",)].unchanged
    assert step.final[("2",)].unchanged == frozenset({"toast"}) and step.final[("2",)].carry_from is None


def test_a_moved_row_carries_from_its_old_key_in_the_destination() -> None:
    changes = [Change("U", {"id": "5", "a": "m", "toast": None}, old_key={"id": "4"}, unchanged=("toast",))]
    [step] = net_steps(COLUMNS, change_batch(COLUMNS, changes, first_lsn=16))
    assert isinstance(step, NetStep)
    assert step.deletes == [("4",)]
    assert step.final[("5",)].carry_from == ("4",)


@pytest.mark.parametrize(
    ("columns", "keyed"),
    [
        (COLUMNS, True),
        ([column("a", 23, key=True), column("b", 25, key=True)], False),
        ([column("a", 23)], False),
    ],
)
def test_keyed_means_a_key_short_of_the_whole_row(columns: list, keyed: bool) -> None:  # type: ignore[type-arg]
    assert is_keyed(columns) is keyed


def test_row_changes_take_unchanged_values_from_the_old_row() -> None:
    cols = [column("a", 23, key=True), column("t", 25, key=True)]
    old = {"a": "1", "t": "long"}
    changes = [
        Change("U", {"a": "2", "t": None}, old_key=old, unchanged=("t",)),
        Change("D", {"a": "2", "t": "long"}),
    ]
    out = list(row_changes(cols, change_batch(cols, changes, first_lsn=16)))
    assert [(c.op, c.old, c.new) for c in out] == [  # type: ignore[union-attr]
        ("U", old, {"a": "2", "t": "long"}),
        ("D", {"a": "2", "t": "long"}, None),
    ]


def test_an_update_of_a_row_of_nulls_only_removes_that_row() -> None:
    """REPLICA IDENTITY FULL sends every UPDATE's old row: one of NULLs only is still a row."""
    cols = [column("a", 23, key=True), column("t", 25, key=True)]
    nulls = {"a": None, "t": None}
    changes = [Change("U", {"a": "1", "t": "x"}, old_key=nulls)]
    out = list(row_changes(cols, change_batch(cols, changes, first_lsn=16)))
    assert [(c.op, c.old, c.new) for c in out] == [("U", nulls, {"a": "1", "t": "x"})]  # type: ignore[union-attr]
