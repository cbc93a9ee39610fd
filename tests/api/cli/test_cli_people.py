"""``hitlflow people``, ``login``, ``logout`` and ``whoami`` as a person runs them: the
key printed once and never again, broken input refused with nothing changed, and the
commands signed in with a kept credential against a real API on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from api.http.app import create_app
from api.identity.people_store import PeopleStore
from api.settings import HitlflowSettings
from tests.api.cli.test_cli_stack import cli_env
from tests.api.http_support import serve


def hitlflow(cwd: Path, *args: str, stdin: str | None = None,
             **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], capture_output=True, text=True,
        env=cli_env(XDG_CONFIG_HOME=str(cwd / "config"), **env), cwd=cwd, timeout=60,
        input=stdin if stdin is not None else "")


def test_people_add_prints_the_key_once_and_list_never_shows_it(tmp_path: Path):
    added = hitlflow(tmp_path, "people", "add", "ada", "--role", "approver", "--group",
                     "staff", "--group", "ops", "--email", "ada@example.com")
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip()  # stdout: the key alone (a script captures it)
    assert key.startswith("hfk_") and "shown only now" in added.stderr
    assert PeopleStore(tmp_path / ".hitlflow").principal_of(key).groups == ["staff", "ops"]  # type: ignore[union-attr]
    listed = hitlflow(tmp_path, "people", "list")
    assert listed.returncode == 0 and "ada" in listed.stdout and "approver" in listed.stdout
    as_json = json.loads(hitlflow(tmp_path, "people", "list", "--json").stdout)
    assert [p["name"] for p in as_json] == ["ada"] and as_json[0]["groups"] == ["staff", "ops"]
    secret = key.split("_", 2)[2]
    for out in (listed.stdout, json.dumps(as_json), listed.stderr):
        assert secret not in out

    rotated = hitlflow(tmp_path, "people", "rotate", "ada")
    new = rotated.stdout.strip()
    assert rotated.returncode == 0 and new.startswith("hfk_") and new != key
    store = PeopleStore(tmp_path / ".hitlflow")
    assert store.principal_of(key) is None and store.principal_of(new) is not None
    kept = hitlflow(tmp_path, "people", "rotate", "ada", "--keep-old").stdout.strip()
    assert store.principal_of(new) is not None and store.principal_of(kept) is not None

    assert hitlflow(tmp_path, "people", "set-role", "ada", "operator").returncode == 0
    assert store.principal_of(kept).role == "operator"  # type: ignore[union-attr]
    assert hitlflow(tmp_path, "people", "remove", "ada").returncode == 0
    assert store.principal_of(kept) is None
    assert "nobody" in hitlflow(tmp_path, "people", "list").stdout


@pytest.mark.parametrize(("args", "said"), [
    (["people", "add", "bad name", "--role", "viewer"], "invalid name"),
    (["people", "add", "ada", "--role", "viewer"], "already"),
    (["people", "add", "bob", "--role", "root"], "unknown role 'root'"),
    (["people", "add", "bob"], "--role"),
    (["people", "add", "bob", "--role", "viewer", "--email", "nope"], "email"),
    (["people", "remove", "bob"], "no person named 'bob'"),
    (["people", "rotate", "bob"], "no person named 'bob'"),
    (["people", "set-role", "ada", "root"], "unknown role 'root'"),
])
def test_people_commands_refuse_what_cannot_be_done_and_change_nothing(tmp_path: Path,
                                                                       args, said):
    assert hitlflow(tmp_path, "people", "add", "ada", "--role", "viewer").returncode == 0
    before = (tmp_path / ".hitlflow" / "people.json").read_bytes()
    r = hitlflow(tmp_path, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert said in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (tmp_path / ".hitlflow" / "people.json").read_bytes() == before


@pytest.mark.parametrize("broken", ["{not json", '{"version": 2, "people": []}'])
def test_people_commands_refuse_a_broken_file(tmp_path: Path, broken: str):
    path = tmp_path / ".hitlflow" / "people.json"
    path.parent.mkdir()
    path.write_text(broken)
    os.chmod(path, 0o600)
    for args in (["list"], ["add", "bob", "--role", "viewer"], ["rotate", "bob"]):
        r = hitlflow(tmp_path, "people", *args)
        assert r.returncode == 1 and ".hitlflow/people.json" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert path.read_text() == broken


def test_rotating_up_s_admin_replaces_its_cli_key(tmp_path: Path):
    """The README's flow keeps working after `people rotate admin`: the commands' key
    (cli-key) is the new one; removing admin removes it (they fall back to the token)."""
    from api.cli.api_auth import first_admin, read_cli_key

    data = tmp_path / ".hitlflow"
    key, made = first_admin(data)
    assert made and read_cli_key(data) == key
    assert first_admin(data) == (key, False)
    new = hitlflow(tmp_path, "people", "rotate", "admin").stdout.strip()
    assert read_cli_key(data) == new != key
    assert hitlflow(tmp_path, "people", "remove", "admin").returncode == 0
    assert read_cli_key(data) is None


async def test_login_whoami_logout_against_a_running_api(tmp_path: Path,
                                                         free_port: Callable[[], int]):
    """`login --key-stdin` checks the key with the API and keeps it (0600 in a 0700
    directory); `whoami` then names the person; `login --print-token` prints it for curl;
    a wrong key is refused and nothing kept; `logout` forgets it."""
    data = tmp_path / "data"
    key = PeopleStore(data).add("ada", "approver", ["staff"])
    settings = HitlflowSettings(data_dir=data, temporal_address="127.0.0.1:9")
    async with serve(create_app(settings), free_port()) as server:
        url = ["--api-url", server.url]

        def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            return hitlflow(tmp_path, *args, *url, stdin=stdin)

        wrong = await asyncio.to_thread(run, "login", "--key-stdin", stdin=key[:-3] + "xyz\n")
        assert wrong.returncode == 1 and "does not accept it" in wrong.stderr
        assert "nothing was stored" in wrong.stderr
        assert not (tmp_path / "config" / "hitlflow" / "credentials.json").exists()
        anonymous = await asyncio.to_thread(run, "whoami")
        assert anonymous.returncode == 1 and "unauthorized" in anonymous.stderr

        ok = await asyncio.to_thread(run, "login", "--key-stdin", stdin=key + "\n")
        assert ok.returncode == 0, ok.stderr
        assert "as ada (approver; local:ada, groups staff)" in ok.stdout
        assert key not in ok.stdout + ok.stderr
        path = tmp_path / "config" / "hitlflow" / "credentials.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

        me = await asyncio.to_thread(run, "whoami", "--json")
        assert me.returncode == 0, me.stderr
        assert json.loads(me.stdout)["subject"] == "ada" and key not in me.stdout
        printed = await asyncio.to_thread(run, "login", "--print-token")
        assert printed.stdout.strip() == key and "hitlflow login" in printed.stderr

        out = await asyncio.to_thread(run, "logout")
        assert out.returncode == 0 and "logged out" in out.stdout
        assert (await asyncio.to_thread(run, "whoami")).returncode == 1
        empty = await asyncio.to_thread(run, "login", "--key-stdin", stdin="\n")
        assert empty.returncode == 2 and "no key or token" in empty.stderr


@pytest.mark.parametrize(("env", "said"), [
    ({"HITLFLOW_AUTH_MODE": "proxy"}, "HITLFLOW_PROXY_TRUSTED_ADDRESSES"),
    ({"HITLFLOW_AUTH_MODE": "off", "HITLFLOW_API_TOKEN": "x" * 32}, "both set"),
])
def test_up_refuses_what_nobody_could_sign_in_to_before_it_starts(
        tmp_path: Path, free_port: Callable[[], int], env: dict[str, str], said: str):
    from api.runtime.devserver import check_port_free

    ports = [free_port() for _ in range(3)]
    r = hitlflow(tmp_path, "up", "--temporal-port", str(ports[0]), "--ui-port", str(ports[1]),
                 "--api-port", str(ports[2]), **env)
    assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
    for port in ports:
        check_port_free("127.0.0.1", port, "nothing")  # nothing was started
    assert not (tmp_path / ".hitlflow" / "people.json").exists()


def test_a_broken_people_file_stops_up_with_the_fix(tmp_path: Path):
    path = tmp_path / ".hitlflow" / "people.json"
    path.parent.mkdir()
    path.write_text("{}")
    os.chmod(path, 0o644)
    r = hitlflow(tmp_path, "up", "--no-worker")
    assert r.returncode == 2 and "chmod 600" in r.stderr and "Traceback" not in r.stderr
    assert path.read_text() == "{}" and not (tmp_path / ".hitlflow" / "cli-key").exists()
