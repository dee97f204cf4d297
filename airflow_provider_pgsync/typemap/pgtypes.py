"""A PostgreSQL type as the catalog describes it, resolved through domains, arrays and composites."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PgType:
    """One type: ``name`` as ``format_type`` prints it, ``base`` its pg_catalog/extension type name.

    ``kind`` is ``pg_type.typtype`` after domains are unwrapped (``b`` base, ``e`` enum,
    ``c`` composite, ``r`` range, ``m`` multirange) or ``a`` for an array. An array has its
    ``element`` and its declared ``ndims`` (``attndims``; 0 when undeclared counts as 1);
    a composite has its ``fields``. ``precision``/``scale`` are set for ``numeric(p,s)``.
    """

    name: str
    base: str
    kind: str = "b"
    element: PgType | None = None
    ndims: int = 0
    fields: tuple[tuple[str, PgType], ...] = ()
    precision: int | None = None
    scale: int | None = None


def numeric_precision_scale(typmod: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of a ``numeric`` type modifier; None for unconstrained numeric.

    PostgreSQL packs them as ``((p << 16) | (s & 0x7ff)) + 4``; since PostgreSQL 15 the
    scale is an 11-bit signed number (it may be negative or exceed the precision).
    """
    if typmod < 4:
        return None
    packed = typmod - 4
    scale = packed & 0x7FF
    if scale >= 0x400:
        scale -= 0x800
    return (packed >> 16) & 0xFFFF, scale
