"""Which API a client command talks to, and which credential it sends: the one given,
the one `hitlflow login` kept for that API, then what ``up`` keeps (its admin's key, its
token): those only to the loopback address ``up`` recorded (docs/security.md,
"Identity")."""

from __future__ import annotations

import os
import stat

import pytest

from api.cli.api_auth import (
    CLI_KEY_FILE,
    TOKEN_FILE,
    TokenFileError,
    load_or_create_token,
    write_cli_key,
)
from api.cli.credentials import credentials_path, store_credential
from api.cli.options import API_URL_FILE, Stack

KEPT = "kept-token-0123456789"


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    for name in ("HITLFLOW_API_TOKEN", "HITLFLOW_API_URL", "HITLFLOW_API_PORT",
                 "HITLFLOW_API_HOST", "HITLFLOW_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
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


KEY = "hfk_0123456789abcdef_" + "k" * 43


def test_the_order_given_then_login_then_up_s_key_then_up_s_token(data_dir, monkeypatch):
    url = "http://127.0.0.1:8123"
    (data_dir / API_URL_FILE).write_text(url + "\n")
    stack = Stack(data_dir=data_dir)
    assert stack.credential()[0] == KEPT  # only up's token
    write_cli_key(data_dir, KEY)
    assert stat.S_IMODE((data_dir / CLI_KEY_FILE).stat().st_mode) == 0o600
    assert stack.credential() == (KEY, f"up's admin key ({data_dir / 'cli-key'})")
    store_credential(url + "/", "logged-in-credential")  # kept without the slash
    assert stat.S_IMODE(credentials_path().stat().st_mode) == 0o600
    assert stat.S_IMODE(credentials_path().parent.stat().st_mode) == 0o700
    assert stack.credential()[0] == "logged-in-credential"
    assert Stack(data_dir=data_dir, token="given").credential()[0] == "given"
    monkeypatch.setenv("HITLFLOW_API_TOKEN", "from-env")
    assert stack.credential()[0] == "from-env"


def test_up_s_key_goes_nowhere_else_but_a_login_for_that_api_does(data_dir):
    (data_dir / API_URL_FILE).write_text("http://127.0.0.1:8123\n")
    write_cli_key(data_dir, KEY)
    elsewhere = Stack(data_dir=data_dir, api_url="http://10.0.0.5:8000")
    assert elsewhere.credential() == (None, "none")
    store_credential("http://10.0.0.5:8000", "for-that-api")
    assert elsewhere.credential()[0] == "for-that-api"
    assert Stack(data_dir=data_dir, api_url="http://10.0.0.6:8000").api_token() is None


@pytest.mark.parametrize("how", ["world-readable", "not json", "wrong shape", "a symlink"])
def test_a_broken_credentials_file_is_refused_not_used(data_dir, how):
    import typer

    store_credential("http://127.0.0.1:8123", "kept")
    path = credentials_path()
    if how == "world-readable":
        os.chmod(path, 0o644)
    elif how == "not json":
        path.write_text("{")
    elif how == "wrong shape":
        path.write_text('{"version": 1, "apis": {"x": "not an entry"}}')
    else:
        target = path.with_name("elsewhere.json")
        path.rename(target)
        path.symlink_to(target)
    (data_dir / API_URL_FILE).write_text("http://127.0.0.1:8123\n")
    with pytest.raises(typer.Exit):
        Stack(data_dir=data_dir).credential()
