"""The session settings' pure parts: keepalive defaults under the connection's extras, timeouts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.sessions import KEEPALIVES, keepalive_args, timeout_ms, with_keepalives


def test_the_connection_s_own_keepalive_settings_win() -> None:
    args = with_keepalives({"host": "db", "keepalives_idle": "5", "keepalives": 0})
    assert args == {"host": "db", "keepalives": 0, "keepalives_idle": "5", "keepalives_interval": 10,
                    "keepalives_count": 6}  # fmt: skip
    assert keepalive_args({}) == KEEPALIVES
    tuned = keepalive_args({"keepalives_count": 2, "sslmode": "verify-full"})
    assert tuned == {**KEEPALIVES, "keepalives_count": 2}


@pytest.mark.parametrize(
    ("value", "ms"),
    [(None, 0), (0, 0), (0.0, 0), (1.5, 1500), (0.0001, 1), (timedelta(minutes=2), 120_000), (3, 3000)],
)
def test_timeouts_in_milliseconds(value: float | timedelta | None, ms: int) -> None:
    assert timeout_ms(value, what="t") == ms


@pytest.mark.parametrize("value", [-1, float("nan"), True, "30s", timedelta(seconds=-1)])
def test_a_bad_timeout_is_refused_naming_it(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^peek_statement_timeout must be a number of seconds of 0 or"):
        timeout_ms(value, what="peek_statement_timeout")  # type: ignore[arg-type]
