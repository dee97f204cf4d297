"""Payloads captured from a real PostgreSQL 15 server (dev/capture_golden.py) decode as recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_pgsync.pgoutput import LSN, decode_message
from airflow_provider_pgsync.pgoutput import messages as m

GOLDEN = Path(__file__).parent / "golden"
MANIFEST: dict[str, dict[str, object]] = json.loads((GOLDEN / "manifest.json").read_text())
_NAMES = {name: getattr(m, name) for name in dir(m) if isinstance(getattr(m, name), type)}


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_golden_payload_decodes_as_recorded(name: str) -> None:
    entry = MANIFEST[name]
    payload = (GOLDEN / name).read_bytes()
    message = decode_message(payload, protocol_version=2, in_stream=bool(entry["in_stream"]))
    assert repr(message) == entry["decoded"]
    # the recorded text is itself a faithful description: evaluating it gives the same message
    assert eval(str(entry["decoded"]), {**_NAMES, "LSN": LSN.parse}) == message


def test_golden_payloads_cover_every_message_of_versions_1_and_2() -> None:
    kinds = {str(entry["decoded"]).split("(", 1)[0] for entry in MANIFEST.values()}
    assert kinds == {
        "Begin", "Commit", "Origin", "Relation", "Type", "Insert", "Update", "Delete",
        "Truncate", "LogicalMessage", "StreamStart", "StreamStop", "StreamCommit", "StreamAbort",
    }  # fmt: skip
    kinds_of_values = set()
    for name in MANIFEST:
        message = decode_message((GOLDEN / name).read_bytes(), in_stream=bool(MANIFEST[name]["in_stream"]))
        for attr in ("new_tuple", "old_tuple", "key_tuple"):
            value = getattr(message, attr, None)
            if value is not None:
                kinds_of_values |= set(value.kinds.decode())
    assert kinds_of_values == {"n", "u", "t", "b"}
