"""What the operator tells the baseline's Spark job, and what the job reports back; JSON, no secrets."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.typemap.spark import ColumnRead


@dataclass(frozen=True)
class BaselineJobSpec:
    """One table's baseline: the JDBC source, its partitions, the column reads and the destinations.

    ``jdbc_url`` and ``conninfo`` (libpq) name the source without the password. ``query`` is
    the table as a subquery (``dbtable``) for Spark's JDBC source; ``arrow_query`` the same
    with the Arrow path's projections, or empty when that path is off or a column cannot take
    it (``baseline/arrow_copy.py``). ``keys`` identify a row (none: the whole row does). The
    job splits the table's ``blocks`` into ctid ranges of about ``target_partition_bytes`` of
    its ``table_bytes``, as many as fit its cluster's task slots; the ``session`` statements
    join every partition's connection to the snapshot; a partitioned table's ``leaves`` are read
    each alone, whole or in ctid ranges. With ``stage_as`` (a backfill's id) the
    job only stages the rows for apply (``LakeDestination.backfill_dir``) and leaves the base
    and the catalog alone.

    ``lineage`` names this baseline's result in every destination: the lake's new base version
    folder, the PostgreSQL destinations' recorded lineage. Each destination is a dict with a
    ``kind``: a lake's config (``LakeDestination.to_config``), or ``postgres`` with ``name``,
    ``conninfo`` (libpq, no password), ``staging`` and ``parts`` (tables, as SQL text) and
    ``columns`` (the names copied); PostgreSQL destinations get ``pg_query``, the table as a
    subquery of its published columns as they are (their text output is what is copied).

    Passwords travel by reference only (``baseline/passfile.py``): ``passfile`` is the password
    file's name, shipped with the job when ``passfile_shipped``, else a path on every node (a
    secret the cluster manager mounts); empty when no connection has a password.
    """

    table: str
    jdbc_url: str
    conninfo: str
    user: str
    query: str
    blocks: int
    table_bytes: int
    target_partition_bytes: int
    session: tuple[str, ...]
    columns: tuple[ColumnRead, ...]
    destinations: tuple[dict[str, Any], ...]
    fetch_size: int = 10_000
    rows_estimate: int = 0
    progress_seconds: float = 10.0
    arrow_query: str = ""
    keys: tuple[str, ...] = ()
    stage_as: str = ""
    lineage: str = ""
    pg_query: str = ""
    passfile: str = ""
    passfile_shipped: bool = False
    leaves: tuple[tuple[str, int, int], ...] = ()
    """A partitioned table's leaf partitions in the snapshot, ``(name, blocks, bytes)`` each, in the
    order the queries number them (``baseline/plan.py``); the job plans its partitions over them
    (``leaf_predicates``). Empty: the table is read by ctid ranges of its own."""

    @property
    def session_init(self) -> str:
        """The session statements as one (JDBC's ``sessionInitStatement``)."""
        return "; ".join(self.session)

    def lakes(self) -> list[LakeDestination]:
        """The lake destinations among ``destinations``."""
        return [LakeDestination.from_config(d) for d in self.destinations if d.get("kind", "lake") == "lake"]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BaselineJobSpec:
        data = json.loads(text)
        data["columns"] = tuple(ColumnRead(**c) for c in data["columns"])
        data["destinations"] = tuple(data["destinations"])
        data["session"] = tuple(data["session"])
        data["keys"] = tuple(data.get("keys", ()))
        data["leaves"] = tuple((str(n), int(b), int(s)) for n, b, s in data.get("leaves", ()))
        return cls(**data)


@dataclass(frozen=True)
class BaselineResult:
    """The job's report: rows written and where, timings, and per destination its outcome.

    ``copy_seconds`` runs from the start of reading to the base swapped in; ``catalog_seconds``
    is the swap's share of it (the metastore step).

    Each destination's part succeeds or fails on its own: ``written`` has an entry (with its
    ``destination`` name) for each one that succeeded, ``failed`` the error of each one that
    did not, by destination name. ``ok`` when every destination succeeded. A failure of the job
    as a whole (nothing was decided per destination: e.g. its session or the snapshot) is
    ``ok`` False with an empty ``failed``; ``error`` says why, or sums up ``failed``.
    """

    ok: bool
    rows: int = 0
    partitions: int = 0
    session_seconds: float = 0.0
    copy_seconds: float = 0.0
    catalog_seconds: float = 0.0
    written: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    error: str = ""
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def failed_as_a_whole(self) -> bool:
        """The job failed before any destination's part had an outcome of its own."""
        return not self.ok and not self.failed

    def error_of(self, destination: str) -> str | None:
        """Why ``destination``'s part failed (the job's error when it failed as a whole), or None."""
        if self.failed_as_a_whole:
            return self.error
        return self.failed.get(destination)

    def with_failure(self, destination: str, error: str) -> BaselineResult:
        """This result with ``destination``'s part failed with ``error`` (its entry in ``written``
        dropped), after the job (e.g. a replica's finish, a custom destination's load)."""
        failed = {**self.failed, destination: error}
        return replace(
            self,
            ok=False,
            written=tuple(w for w in self.written if w.get("destination") != destination),
            failed=failed,
            error=summary(failed),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BaselineResult:
        data = json.loads(text)
        data["written"] = tuple(data.get("written", ()))
        data["failed"] = dict(data.get("failed", {}))
        return cls(**data)


def summary(failed: dict[str, str]) -> str:
    """One line for the destinations' errors, each error once with the destinations it stopped."""
    stopped: dict[str, list[str]] = {}
    for name, error in failed.items():
        stopped.setdefault(error, []).append(name)
    return "; ".join(
        f"destination{'s' if len(names) > 1 else ''} {', '.join(names)}: {error}"
        for error, names in stopped.items()
    )
