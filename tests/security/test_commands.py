"""Who may run code, and what commands see (issue 25, item 4; docs/security.md,
"Who may run code").

On the real stack: the API over HTTP, the real dev server, and the real `hitlflow
worker` process holding secrets in its environment (an LLM key, the API token, a
deploy secret, a database URL with a password, the checkpoint key in a file). Each
test says what it tried, and that it did not get in.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from activities.command_env import REDACTED, command_env, redact, secret_values
from api.http.app import create_app
from api.http.command_policy import SHELL, refused_commands
from api.runtime.worker import CHECKPOINT_KEY_FILE
from api.settings import DEMO_COMMAND, HitlflowSettings
from observation.exporter import export_session
from observation.exporter.keys import KEY_NAME
from tests.api.http_support import demo_body, error_of, serve, session_until
from tests.support.sessions import worker_process
from workflows.config import SessionConfig

TOKEN = "api-token-" + uuid.uuid4().hex
LLM_KEY = "sk-llm-" + uuid.uuid4().hex
DEPLOY_SECRET = "deploy-" + uuid.uuid4().hex
DB_PASSWORD = "dbpw-" + uuid.uuid4().hex
CHECKPOINT_SEED = "c2VlZC0" + uuid.uuid4().hex
CHECKPOINT_KEY = f"PRIVATE+KEY+test.local+0a1b2c3d+{CHECKPOINT_SEED}"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Stack:
    client: Client
    #: The API as shipped (the default allow-list) and one whose operator allows `shell`.
    default: httpx.AsyncClient
    shell: httpx.AsyncClient
    secrets: dict[str, str]
    task_queue: str


@pytest.fixture(scope="module")
async def stack(dev_env, free_port: Callable[[], int],
                tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    data = tmp_path_factory.mktemp("security-data")
    key_file = data / "operator-checkpoint.key"
    key_file.write_text(CHECKPOINT_KEY + "\n")
    task_queue = f"tq-sec-{uuid.uuid4().hex[:8]}"
    secrets = {"OPENAI_API_KEY": LLM_KEY, "HITLFLOW_API_TOKEN": TOKEN,
               "DEPLOY_SECRET": DEPLOY_SECRET,
               "DATABASE_URL": f"postgresql://app:{DB_PASSWORD}@db.invalid/app",
               "HITLFLOW_CHECKPOINT_KEY": str(key_file), "HITLFLOW_DATA_DIR": str(data)}
    target = dev_env.client.service_client.config.target_host

    def api(**allowed: list[str]):
        return serve(create_app(HitlflowSettings(
            temporal_address=target, task_queue=task_queue, api_token=TOKEN, data_dir=data,
            **allowed)), free_port())

    with worker_process(dev_env.client, task_queue, env=secrets):  # `hitlflow worker`
        async with api() as default_api, \
                api(api_allowed_commands=[SHELL, DEMO_COMMAND]) as shell_api, \
                httpx.AsyncClient(base_url=default_api.url, headers=AUTH, timeout=30) as d, \
                httpx.AsyncClient(base_url=shell_api.url, headers=AUTH, timeout=30) as s:
            yield Stack(dev_env.client, d, s, secrets, task_queue)


def step_outputs(events_file: Path) -> dict[int, str]:
    """Each StepCompleted of the log: step -> its stdout and stderr."""
    outputs = {}
    for line in events_file.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "StepCompleted":
            payload = event.get("payload", event)
            outputs[payload["step"]] = (payload.get("stdout") or "") + (payload.get("stderr")
                                                                        or "")
    return outputs


async def run_plan(stack: Stack, plan: dict, tmp_path: Path) -> tuple[dict[int, str], str]:
    r = await stack.shell.post("/api/sessions", json={"mode": "auto", "plan": plan})
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    s = await session_until(stack.shell, sid, lambda s: s["status"] in ("succeeded", "failed"),
                            limit_s=60)
    assert s["status"] == "succeeded", s
    out = tmp_path / "runs"
    await export_session(stack.client, sid, out)
    events = out / sid / "events.ndjson"
    history = await stack.client.get_workflow_handle(sid).fetch_history()
    return step_outputs(events), events.read_text() + history.to_json()


async def test_a_plan_step_running_env_sees_no_secret(stack: Stack, tmp_path: Path):
    """Tried: a plan step `run: env` on a worker whose environment holds the LLM key,
    the API token, a deploy secret and a database password. Its output (and the whole
    log and history) shows none of them, not even their names: the command got the
    few variables every command gets, not the worker's environment."""
    outputs, everything = await run_plan(stack, {"steps": [{"run": "env"}]}, tmp_path)
    env_output = outputs[0]
    assert "PATH=" in env_output  # it ran, and printed an environment
    for name, value in stack.secrets.items():
        assert name not in env_output, f"the worker's {name} reached a command"
        assert value not in everything
    for secret in (TOKEN, LLM_KEY, DEPLOY_SECRET, DB_PASSWORD, CHECKPOINT_SEED):
        assert secret not in everything


async def test_secrets_a_command_gets_hold_of_are_redacted(stack: Stack, tmp_path: Path):
    """Tried: a step that is passed a secret by name (`pass_env`) and echoes it, one
    that prints the checkpoint key's file, and one that reads the worker's whole
    environment from /proc (a command runs as the worker's user). Every secret's
    value is `[redacted]` in the output, in the log and in history."""
    key_file = stack.secrets["HITLFLOW_CHECKPOINT_KEY"]
    outputs, everything = await run_plan(stack, {"pass_env": ["DEPLOY_SECRET"], "steps": [
        {"run": 'echo "deploying with $DEPLOY_SECRET"'},
        {"run": f"cat '{key_file}'; echo; cut -d+ -f5 '{key_file}'"},
        {"run": "tr '\\0' '\\n' < /proc/$PPID/environ"},
    ]}, tmp_path)
    assert outputs[0].strip() == f"deploying with {REDACTED}"
    assert outputs[1].split() == [REDACTED, REDACTED]
    worker_env = outputs[2].splitlines()
    for name in ("OPENAI_API_KEY", "HITLFLOW_API_TOKEN", "DEPLOY_SECRET"):
        assert f"{name}={REDACTED}" in worker_env, (name, worker_env)
    assert f"DATABASE_URL=postgresql://app:{REDACTED}@db.invalid/app" in worker_env
    for secret in (TOKEN, LLM_KEY, DEPLOY_SECRET, DB_PASSWORD, CHECKPOINT_SEED):
        assert secret not in everything


async def test_a_config_that_runs_a_command_is_refused_without_the_setting(stack: Stack):
    """Tried: starting, over HTTP on the API as shipped, a plan with a `run` step, a
    plan with a verify command, and an agent whose tool server is an arbitrary
    program. Each is a 403 that names the setting and what runs a command, and no
    session exists afterwards."""
    tries = {
        "plan.steps[0].run": {"plan": {"steps": [{"run": "id > pwned.txt"}]}},
        "plan.steps[1].verify.cmd": {"plan": {"steps": [
            {"gate": True}, {"run": {"server": "notes", "tool": "list_notes"},
                             "verify": {"cmd": "id"}}],
            "tools": [demo_body(Path("n"))["agent"]["tools"][0]]}},
        "agent.tools[0]": {"agent": {"llm": {"provider": "scripted", "responses": [
            {"text": "hi", "end": True}]},
            "tools": [{"name": "sh", "command": ["/bin/sh", "-c", "id > pwned.txt"]}]}},
    }
    for where, body in tries.items():
        sid = f"s-refused-{uuid.uuid4().hex[:8]}"
        r = await stack.default.post("/api/sessions", params={"session_id": sid}, json=body)
        assert r.status_code == 403, r.text
        err = error_of(r)
        assert err["code"] == "commands_not_allowed"
        assert where in err["message"] and "HITLFLOW_API_ALLOWED_COMMANDS" in err["message"]
        assert (await stack.default.get(f"/api/sessions/{sid}")).status_code == 404
    assert not Path("pwned.txt").exists()


async def test_a_listed_program_cannot_be_bent_to_run_other_code(stack: Stack, tmp_path: Path):
    """Tried: the demo's allowed server with a `cwd` of one's choosing, with
    PYTHONPATH, LD_PRELOAD, a BASH_FUNC_ function or HOME in its env, a variable of the
    worker passed to it, started by a relative `python`, and a
    program that is only named like the demo's module. All refused (403)."""
    demo = demo_body(tmp_path)
    server = demo["agent"]["tools"][0]
    bent = [{**server, "cwd": str(tmp_path)},
            {**server, "env": {"PYTHONPATH": str(tmp_path)}},
            {**server, "env": {"LD_PRELOAD": str(tmp_path / "x.so")}},
            # bash imports it as a function, where `python3` is a wrapper script
            {**server, "env": {"BASH_FUNC_exec%%": "() { id > pwned.txt; }"}},
            {**server, "env": {"HOME": str(tmp_path)}},  # Python's user site
            {**server, "pass_env": ["HOME"]},
            {**server, "command": ["./python", *server["command"][1:]]},
            {**server, "command": ["/bin/sh", *server["command"][1:]]}]
    for tool in bent:
        body = {**demo, "agent": {**demo["agent"], "tools": [tool]}}
        r = await stack.default.post("/api/sessions", json=body)
        assert r.status_code == 403, (tool, r.text)
        assert error_of(r)["code"] == "commands_not_allowed"


async def test_the_demo_config_is_accepted_by_default(stack: Stack, tmp_path: Path):
    """Tried: the README's demo (its tool server is `sys.executable -m
    activities.demo_notes_server`) on the API as shipped: started (201), no setting."""
    assert HitlflowSettings().api_allowed_commands == [DEMO_COMMAND]
    r = await stack.default.post("/api/sessions", json=demo_body(tmp_path / "notes"))
    assert r.status_code == 201, r.text
    assert refused_commands(SessionConfig.model_validate(
        {**demo_body(tmp_path), "agent": {**demo_body(tmp_path)["agent"], "tools": [
            {"name": "notes", "command": ["python3", "-m", "activities.demo_notes_server",
                                          "--dir", "notes"]}]}}), [DEMO_COMMAND]) == []


def test_the_environment_rule_and_the_redaction_rule():
    """What a command gets: the few base variables, the names passed, `env` over them;
    what is redacted: secret-looking names' values, URL passwords, not short values."""
    worker = {"PATH": "/bin", "LC_ALL": "C", "OPENAI_API_KEY": LLM_KEY, "OTHER": "x",
              "SHORT_TOKEN": "abc", "DB": f"postgresql://u:{DB_PASSWORD}@h/d"}
    assert command_env(["OTHER", "UNSET"], {"E": "1"}, worker) == {
        "PATH": "/bin", "LC_ALL": "C", "OTHER": "x", "E": "1"}
    secrets = secret_values(worker)
    assert LLM_KEY in secrets and DB_PASSWORD in secrets and "abc" not in secrets
    assert redact(f"k={LLM_KEY} p={DB_PASSWORD} abc", secrets) == \
        f"k={REDACTED} p={REDACTED} abc"
    assert CHECKPOINT_KEY_FILE == KEY_NAME  # the worker names the exporter's key file


async def test_a_config_cannot_pass_the_workers_own_settings(stack: Stack):
    """Tried: a plan (on the API that allows shell) whose `pass_env` names
    HITLFLOW_API_TOKEN, and a tool server's naming HITLFLOW_CHECKPOINT_KEY: 422, and
    nothing started."""
    plan = {"plan": {"pass_env": ["HITLFLOW_API_TOKEN"], "steps": [{"run": "env"}]}}
    demo = demo_body(Path("n"))
    tool = {**demo["agent"]["tools"][0], "pass_env": ["HITLFLOW_CHECKPOINT_KEY"]}
    for body in (plan, {**demo, "agent": {**demo["agent"], "tools": [tool]}}):
        sid = f"s-passing-{uuid.uuid4().hex[:8]}"
        r = await stack.shell.post("/api/sessions", params={"session_id": sid}, json=body)
        assert r.status_code == 422, r.text
        assert "HITLFLOW_* settings" in error_of(r)["message"]
        assert (await stack.shell.get(f"/api/sessions/{sid}")).status_code == 404


def test_the_demo_notes_server_touches_only_its_note_files(tmp_path: Path):
    """Tried: note names that are files other programs read (`authorized_keys`, a
    cron entry, `hitlflow`): each is `<name>.note`, never the file itself."""
    from activities.demo_notes_server import NotesStore

    store = NotesStore(tmp_path)
    for name in ("authorized_keys", "x", "hitlflow"):
        assert store.path(name) == tmp_path / f"{name}.note"
    (tmp_path / "authorized_keys").write_text("someone's key")
    (tmp_path / "kept.note").write_text("n")
    assert store.names() == ["kept"]
