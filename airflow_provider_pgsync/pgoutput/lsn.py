"""The PostgreSQL log sequence number (``pg_lsn``) as a value type."""

from __future__ import annotations

import re
from dataclasses import dataclass

from airflow_provider_pgsync.errors import ConfigError

_LSN_TEXT = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")
_MAX = 0xFFFF_FFFF_FFFF_FFFF


@dataclass(frozen=True, order=True, slots=True)
class LSN:
    """A 64-bit WAL position; parses and prints PostgreSQL's ``X/Y`` text form."""

    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or not 0 <= self.value <= _MAX:
            raise ConfigError(f"LSN {self.value!r} is not an integer in 0..2^64-1")

    @classmethod
    def parse(cls, text: str) -> LSN:
        """Parse ``'16/B374D848'``; raise ConfigError naming the text otherwise."""
        match = _LSN_TEXT.match(text.strip())
        if match is None:
            raise ConfigError(f"{text!r} is not an LSN; expected hex 'X/Y' such as '0/16B3748'")
        return cls((int(match.group(1), 16) << 32) | int(match.group(2), 16))

    def __str__(self) -> str:
        return f"{self.value >> 32:X}/{self.value & 0xFFFF_FFFF:X}"

    def __repr__(self) -> str:
        return f"LSN('{self}')"

    def __int__(self) -> int:
        return self.value

    def __sub__(self, other: LSN) -> int:
        """The distance in bytes between two positions."""
        return self.value - other.value


ZERO = LSN(0)
