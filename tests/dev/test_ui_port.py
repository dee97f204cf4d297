"""`make ui`'s port: ``$PGSYNC_UI_PORT``, else 8080, else a free one; a busy port asked for is named."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from ui import DEFAULT_PORT, PORT_ENV, choose_port, is_free


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield int(server.getsockname()[1])


def test_a_free_port_asked_for_is_used() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    assert choose_port({PORT_ENV: str(port)}) == port


def test_a_busy_port_asked_for_fails_naming_the_setting(busy_port: int) -> None:
    with pytest.raises(SystemExit, match=rf"port {busy_port} \({PORT_ENV}\) is in use.*make ui {PORT_ENV}="):
        choose_port({PORT_ENV: str(busy_port)})


@pytest.mark.parametrize("value", ["http", "0", "70000", "80; rm -rf /"])
def test_a_port_that_is_no_number_is_refused(value: str) -> None:
    with pytest.raises(SystemExit, match=f"{PORT_ENV}=.* is not a port number"):
        choose_port({PORT_ENV: value})


def test_without_a_setting_8080_or_else_a_free_port(capsys: pytest.CaptureFixture[str]) -> None:
    if not is_free(DEFAULT_PORT):
        port = choose_port({})
        assert port != DEFAULT_PORT and is_free(port)
        assert f"port {DEFAULT_PORT} is in use, so the UI listens on {port}" in capsys.readouterr().out
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", DEFAULT_PORT))
        server.listen()
        port = choose_port({})
    assert port != DEFAULT_PORT
    assert f"port {DEFAULT_PORT} is in use, so the UI listens on {port}" in capsys.readouterr().out
