"""Deterministic, filesystem-safe paths of changelog segments.

``<schema>.<table>/v<version:04d>/<first_commit_lsn:016X>-<last_commit_lsn:016X>-<part:04d>.parquet``

Each name part is percent-encoded with ``urllib.parse.quote(safe="")`` and, beyond that,
``.`` is encoded as ``%2E`` so the dot between schema and table is unambiguous
(``"a.b".c`` and ``a."b.c"`` get different folders) and no folder is ``.`` or ``..``.
A folder name longer than 200 characters (possible with long non-ASCII names) is cut
and suffixed with ``+`` and a hash of the table name; ``quote`` always encodes ``+``,
so such a name never equals an uncut one. Names are case-sensitive, as PostgreSQL's are:
keep the changelog on a case-sensitive filesystem.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote

from airflow_provider_pgsync.source.names import TableRef

MAX_FOLDER_CHARS = 200
SUFFIX = ".parquet"


def quote_part(part: str) -> str:
    """One identifier as a file-name-safe string (see the module docstring)."""
    return quote(part, safe="").replace(".", "%2E")


def table_folder(table: TableRef) -> str:
    """The folder of a table's segments, relative to the changelog root."""
    name = f"{quote_part(table.schema)}.{quote_part(table.name)}"
    if len(name) <= MAX_FOLDER_CHARS:
        return name
    digest = hashlib.sha256(str(table).encode()).hexdigest()[:24]
    head = name[: MAX_FOLDER_CHARS - len(digest) - 1]
    cut = head.rfind("%", len(head) - 2)
    if cut >= 0:  # do not split a %XX escape
        head = head[:cut]
    return f"{head}+{digest}"


_NAME = re.compile(r"([0-9A-F]{16})-([0-9A-F]{16})-([0-9]{4})" + re.escape(SUFFIX))


def first_lsn_of(path: str) -> int | None:
    """The first commit LSN a segment path carries in its file name (None: not a segment)."""
    found = _NAME.fullmatch(path.rsplit("/", 1)[-1])
    return int(found.group(1), 16) if found else None


def segment_path(table: TableRef, schema_version: int, first_lsn: int, last_lsn: int, part: int) -> str:
    """The path of a segment relative to the changelog root, always with ``/`` separators."""
    return f"{table_folder(table)}/v{schema_version:04d}/{first_lsn:016X}-{last_lsn:016X}-{part:04d}{SUFFIX}"
