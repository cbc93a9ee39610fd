"""Which API a client command talks to, and when it sends the token ``up`` keeps:
only to the loopback address ``up`` recorded (docs/security.md, "The HTTP API")."""

from __future__ import annotations

import os
import stat

import pytest

from api.cli.api_auth import TOKEN_FILE, TokenFileError, load_or_create_token
from api.cli.options import API_URL_FILE, Stack

KEPT = "kept-token-0123456789"


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    for name in ("HITLFLOW_API_TOKEN", "HITLFLOW_API_URL", "HITLFLOW_API_PORT",
                 "HITLFLOW_API_HOST", "HITLFLOW_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / TOKEN_FILE).write_text(KEPT + "\n")
    os.chmod(tmp_path / TOKEN_FILE, 0o600)
    return tmp_path


def test_the_kept_token_goes_to_the_api_up_recorded(data_dir):
    (data_dir / API_URL_FILE).write_text("http://127.0.0.1:8123\n")
    stack = Stack(data_dir=data_dir)
    assert (stack.url(), stack.api_token()) == ("http://127.0.0.1:8123", KEPT)


@pytest.mark.parametrize("elsewhere", [
    {"api_port": 9000},  # another port than up's
    {"api_url": "http://10.0.0.5:8000"},
])
def test_the_kept_token_goes_nowhere_else(data_dir, elsewhere):
    (data_dir / API_URL_FILE).write_text("http://127.0.0.1:8123\n")
    assert Stack(data_dir=data_dir, **elsewhere).api_token() is None


def test_with_up_stopped_the_kept_token_is_not_sent(data_dir):
    """No recorded address (up removes it when it stops): whoever listens on the
    default port gets no token."""
    stack = Stack(data_dir=data_dir)
    assert stack.url() == "http://127.0.0.1:8000" and stack.api_token() is None


def test_a_planted_address_of_another_host_is_ignored(data_dir, monkeypatch):
    """A repository that ships `.hitlflow/api-url` pointing elsewhere: neither the
    person's token nor their configs go there."""
    (data_dir / API_URL_FILE).write_text("https://attacker.example\n")
    monkeypatch.setenv("HITLFLOW_API_TOKEN", "s3cret-of-the-shell")
    stack = Stack(data_dir=data_dir)
    assert stack.url() == "http://127.0.0.1:8000"


def test_white_space_around_a_token_is_not_part_of_it(monkeypatch):
    from api.settings import HitlflowSettings

    monkeypatch.setenv("HITLFLOW_API_TOKEN", "tok-123456 \n")
    assert HitlflowSettings().api_token == "tok-123456"
    monkeypatch.setenv("HITLFLOW_API_TOKEN", "  ")
    assert HitlflowSettings().api_token is None


def test_a_token_file_that_is_not_a_file_of_ours_is_refused(tmp_path):
    (tmp_path / "elsewhere").write_text("x" * 40)
    (tmp_path / TOKEN_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(TokenFileError, match="not a file of yours"):
        load_or_create_token(tmp_path)
    (tmp_path / TOKEN_FILE).unlink()
    token, made = load_or_create_token(tmp_path)
    assert made and stat.S_IMODE((tmp_path / TOKEN_FILE).stat().st_mode) == 0o600
    assert load_or_create_token(tmp_path) == (token, False)
