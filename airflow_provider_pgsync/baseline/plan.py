"""Planning a baseline: the table's ``SELECT`` that every partition reads, and the SQL of the
row conditions in it (``source/row_condition.py``); pure logic."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from airflow_provider_pgsync.baseline.partitions import CTID_COLUMN, LEAF_COLUMN
from airflow_provider_pgsync.source import row_condition as rc
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.source.publication import PublishedTable
from airflow_provider_pgsync.typemap.spark import ColumnRead


def base_query(
    table: PublishedTable,
    reads: Sequence[ColumnRead],
    condition: rc.Condition | None = None,
    leaves: Sequence[TableRef] = (),
) -> sql.Composed:
    """The table as the subquery each partition reads: ``ctid`` and each column as its read
    projects it, with the publication's row filter (so base and stream hold the same rows)
    and, for a backfill, its ``condition``; both rendered from their tokens or tree.

    With ``leaves`` (a partitioned table's leaf partitions, as the baseline's snapshot sees them)
    the subquery is a ``UNION ALL`` of each leaf read alone (``FROM ONLY``, under the table's
    column names, whatever the leaf's column order), numbered in ``LEAF_COLUMN`` by its position:
    a partition's predicate on that number leaves PostgreSQL only its own leaf to scan (a
    partitioned table has no ctid of its own to split)."""
    items = [sql.SQL("ctid AS {}").format(sql.Identifier(CTID_COLUMN))]
    items += [
        sql.SQL("{} AS {}").format(
            sql.SQL(r.select).format(col=sql.Identifier(r.name)), sql.Identifier(r.name)
        )
        for r in reads
    ]
    where = where_clause(table, condition)
    if not leaves:
        return sql.SQL("(SELECT {} FROM {}{}) AS pgsync_base").format(
            sql.SQL(", ").join(items), table.table.identifier, where
        )
    branches = [
        sql.SQL("SELECT {} AS {}, {} FROM ONLY {}{}").format(
            sql.Literal(number),
            sql.Identifier(LEAF_COLUMN),
            sql.SQL(", ").join(items),
            leaf.identifier,
            where,
        )
        for number, leaf in enumerate(leaves)
    ]
    return sql.SQL("({}) AS pgsync_base").format(sql.SQL(" UNION ALL ").join(branches))


def where_clause(table: PublishedTable, condition: rc.Condition | None = None) -> sql.Composable:
    """`` WHERE (row filter) AND (condition)``, or nothing without either."""
    conditions = [sql.SQL("({})").format(condition_sql(c)) for c in (row_filter(table), condition) if c]
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")


def row_filter(table: PublishedTable) -> rc.SqlText | None:
    """The publication's row filter of ``table`` as one checked expression, or None."""
    if not table.row_filter:
        return None
    return rc.check_expression(table.row_filter, f"row_filter of table {table.table}")


def condition_sql(condition: rc.Condition) -> sql.Composable:
    """The SQL of a condition: a safe tree with identifiers and literals quoted by psycopg, or the
    tokens of an ``sql`` condition one by one, names and strings quoted again."""
    if isinstance(condition, rc.SqlText):
        return sql.SQL(" ").join(_token_sql(t) for t in condition.tokens)
    return _expr_sql(condition)


def _token_sql(token: rc.Token) -> sql.Composable:
    if token.kind == "ident":
        return sql.Identifier(token.value)
    if token.kind == "string":
        return sql.Literal(token.value)
    # words, numbers, operators and marks hold no quote, ';' or comment (the tokenizer checked);
    # E'...' and B'...'/X'...' strings are as written, which every reader splits the same way
    return sql.SQL(token.text.replace("{", "{{").replace("}", "}}")).format()


def _expr_sql(expr: rc.Expr) -> sql.Composable:
    if isinstance(expr, rc.Column):
        return sql.Identifier(expr.name)
    if isinstance(expr, rc.Literal):
        return _literal_sql(expr)
    if isinstance(expr, rc.Compare):
        op = sql.SQL(expr.op if expr.op in rc.COMPARISONS else "=")  # a fixed set, never user text
        return sql.SQL("({} {} {})").format(_expr_sql(expr.left), op, _expr_sql(expr.right))
    if isinstance(expr, rc.In):
        values = sql.SQL(", ").join(_literal_sql(v) for v in expr.values)
        return sql.SQL("({} {}IN ({}))").format(_expr_sql(expr.operand), _not(expr.negated), values)
    if isinstance(expr, rc.Between):
        return sql.SQL("({} {}BETWEEN {} AND {})").format(
            _expr_sql(expr.operand), _not(expr.negated), _expr_sql(expr.low), _expr_sql(expr.high)
        )
    if isinstance(expr, rc.IsNull):
        return sql.SQL("({} IS {}NULL)").format(_expr_sql(expr.operand), _not(expr.negated))
    if isinstance(expr, rc.Not):
        return sql.SQL("(NOT {})").format(_expr_sql(expr.item))
    joiner = sql.SQL(" AND ") if expr.op == "AND" else sql.SQL(" OR ")
    return sql.SQL("({})").format(joiner.join(_expr_sql(i) for i in expr.items))


def _not(negated: bool) -> sql.SQL:
    return sql.SQL("NOT ") if negated else sql.SQL("")


def _literal_sql(literal: rc.Literal) -> sql.Composable:
    if literal.type is not None:
        return sql.SQL("CAST({} AS {})").format(
            sql.Literal(literal.value), sql.SQL(rc.TYPED_LITERALS[literal.type])
        )
    if isinstance(literal.value, bool) or literal.value is None:
        return sql.SQL({True: "TRUE", False: "FALSE", None: "NULL"}[literal.value])
    return sql.Literal(literal.value)
