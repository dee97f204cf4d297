"""One readable line per decoded message, for logs and the demo."""

from __future__ import annotations

from airflow_provider_pgsync.pgoutput.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Relation,
    StreamAbort,
    StreamCommit,
    StreamStart,
    Truncate,
    TupleData,
    Update,
)


class ChangeDescriber:
    """Remembers Relation messages and describes changes by table and column name."""

    def __init__(self, max_value_chars: int = 32) -> None:
        self.max_value_chars = max_value_chars
        self.relations: dict[int, Relation] = {}

    def describe(self, message: Message) -> str | None:
        """A line for the message, or None for schema messages (they are remembered)."""
        if isinstance(message, Relation):
            self.relations[message.relation_id] = message
            return None
        if isinstance(message, Begin):
            return f"BEGIN     xid {message.xid}"
        if isinstance(message, Commit):
            return f"COMMIT    end_lsn {message.end_lsn}"
        if isinstance(message, Insert):
            row = self._row(message.relation_id, message.new_tuple)
            return f"INSERT    {self._table(message.relation_id)} {row}"
        if isinstance(message, Update):
            old = self._old(message.relation_id, message.key_tuple, message.old_tuple)
            before = f"{old} -> " if old else ""
            row = self._row(message.relation_id, message.new_tuple)
            return f"UPDATE    {self._table(message.relation_id)} {before}{row}"
        if isinstance(message, Delete):
            old = self._old(message.relation_id, message.key_tuple, message.old_tuple)
            return f"DELETE    {self._table(message.relation_id)} {old}"
        if isinstance(message, Truncate):
            return f"TRUNCATE  {', '.join(self._table(r) for r in message.relation_ids)}"
        if isinstance(message, LogicalMessage):
            return f"MESSAGE   {message.prefix!r} {message.content[: self.max_value_chars]!r}"
        if isinstance(message, StreamStart | StreamCommit | StreamAbort):
            return f"{type(message).__name__:<9} xid {message.xid}"
        return None

    def _table(self, relation_id: int) -> str:
        relation = self.relations.get(relation_id)
        return f"{relation.namespace}.{relation.relation_name}" if relation else f"relation {relation_id}"

    def _old(self, relation_id: int, key: TupleData | None, old: TupleData | None) -> str:
        """The key of a key tuple (its other columns are not sent), or the whole old row."""
        if key is not None:
            return self._row(relation_id, key, key_only=True)
        return self._row(relation_id, old) if old is not None else ""

    def _row(self, relation_id: int, row: TupleData, *, key_only: bool = False) -> str:
        relation = self.relations.get(relation_id)
        names = [c.name for c in relation.columns] if relation else [f"${i + 1}" for i in range(len(row))]
        parts = []
        for i, name in enumerate(names[: len(row)]):
            if key_only and relation is not None and not relation.columns[i].is_key:
                continue
            kind = row.kind(i)
            if kind == "n":
                parts.append(f"{name}=NULL")
                continue
            if kind == "u":
                parts.append(f"{name}=<unchanged TOAST>")
                continue
            value = row.values[i] or b""
            text = value.decode("utf-8", "replace") if kind == "t" else value.hex()
            if len(text) > self.max_value_chars:
                text = f"{text[: self.max_value_chars]}...({len(text)} chars)"
            parts.append(f"{name}={text!r}" if kind == "t" else f"{name}=\\x{text}")
        return " ".join(parts)
