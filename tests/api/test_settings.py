"""HITLFLOW_* lists given as comma-separated strings (the environment's form)."""

from __future__ import annotations

import warnings

from api.settings import LOCAL_HOSTS, HitlflowSettings


def test_comma_separated_lists_from_the_environment(monkeypatch):
    monkeypatch.setenv("HITLFLOW_API_ALLOWED_HOSTS", "a.example, b.example")
    monkeypatch.setenv("HITLFLOW_API_CORS_ORIGINS", "https://x.example")
    monkeypatch.setenv("HITLFLOW_API_ALLOWED_COMMANDS", "shell, python -m tool")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. a validator that overrides another
        s = HitlflowSettings()
    assert s.api_allowed_hosts == ["a.example", "b.example"]
    assert s.api_cors_origins == ["https://x.example"]
    assert s.api_allowed_commands == ["shell", "python -m tool"]


def test_empty_lists_mean_the_local_hosts_and_no_commands(monkeypatch):
    monkeypatch.setenv("HITLFLOW_API_ALLOWED_HOSTS", "")
    monkeypatch.setenv("HITLFLOW_API_ALLOWED_COMMANDS", "")
    s = HitlflowSettings()
    assert s.api_allowed_hosts == list(LOCAL_HOSTS) and s.api_allowed_commands == []
