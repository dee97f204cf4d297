"""The provider metadata names modules that exist and hold the classes Airflow lists."""

from __future__ import annotations

import importlib

from airflow_provider_pgsync.provider_info import get_provider_info


def test_every_module_the_provider_info_names_imports() -> None:
    info = get_provider_info()
    modules = [
        m
        for kind in ("hooks", "operators", "sensors", "triggers")
        for e in info[kind]
        for m in e["python-modules"]
    ]
    assert len(modules) == len(set(modules))
    for name in modules:
        assert importlib.import_module(name).__doc__, name


def test_the_entry_point_is_declared() -> None:
    from importlib.metadata import entry_points

    (entry,) = [
        e
        for e in entry_points(group="apache_airflow_provider")
        if e.value.startswith("airflow_provider_pgsync")
    ]
    assert entry.load() is get_provider_info


def test_the_status_page_plugin_is_registered() -> None:
    from importlib.metadata import entry_points

    from airflow_provider_pgsync.plugins.plugin import PgsyncStatusPlugin

    (entry,) = [e for e in entry_points(group="airflow.plugins") if e.name == "pgsync_status"]
    assert entry.load() is PgsyncStatusPlugin
    (plugin,) = get_provider_info()["plugins"]
    module, _, name = plugin["plugin-class"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is PgsyncStatusPlugin
