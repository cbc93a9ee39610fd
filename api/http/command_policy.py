"""Who may run code: what a session config started over HTTP may run
(docs/security.md, "Who may run code"; the setting HITLFLOW_API_ALLOWED_COMMANDS).

A config runs code on the worker through a plan step's ``run`` or ``verify`` shell
command, and through every tool server started from a ``command``. Until
identities exist (issue 24) the server's allow-list decides, for every caller:

* ``*``: any command;
* ``shell``: plan steps' ``run`` and ``verify`` shell commands (``in_window`` ones too);
* any other entry: the argv prefix of a tool server's ``command`` (shell-like words,
  e.g. ``python -m activities.demo_notes_server``): the command starts with these
  words, any arguments after them. The program word matches as written: with a
  ``/``, the same path; without, the same bare name (looked up on the worker's
  ``PATH``), and ``python`` also a ``python3``/``python3.N`` of that form or an
  interpreter in the API's own environment (where the demo's ``sys.executable``
  lives). A listed command runs as listed: its config may set no ``cwd``, no ``env``
  and no ``pass_env`` (any variable may change what a program runs).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Sequence

from workflows.config import McpServerConfig, SessionConfig
from workflows.plan import VerifyCmd

ANY = "*"
SHELL = "shell"
SETTING = "HITLFLOW_API_ALLOWED_COMMANDS"
PYTHON_RE = re.compile(r"python(3(\.\d+)?)?")

def _same_program(program: str, want: str) -> bool:
    if "/" in want:
        return program == want
    name = program.rsplit("/", 1)[-1]
    if want == "python" and PYTHON_RE.fullmatch(name):
        if "/" not in program:
            return True
        # An interpreter of the API's own environment (the demo's sys.executable).
        here = os.path.realpath(os.path.dirname(sys.executable))
        return os.path.isabs(program) and os.path.realpath(os.path.dirname(program)) == here
    return program == want


def _listed(command: Sequence[str], entry: str) -> bool:
    words = shlex.split(entry)
    if not words or len(command) < len(words):
        return False
    return _same_program(command[0], words[0]) and list(command[1:len(words)]) == words[1:]


def _tool_refusal(server: McpServerConfig, allowed: Sequence[str]) -> str | None:
    """Why ``server``'s command may not run (None: it may)."""
    if server.command is None or ANY in allowed:
        return None
    entries = [e for e in allowed if e != SHELL]
    entry = next((e for e in entries if _listed(server.command, e)), None)
    program = os.path.basename(server.command[0])
    if entry is None:
        return f"the program {program!r} with these arguments is not listed"
    if server.cwd is not None:
        return f"listed as {entry!r}, but it sets cwd (a listed command runs as listed)"
    # Any variable may change what a program runs (a wrapper script's shell imports
    # BASH_FUNC_x%% as functions; HOME, OPENSSL_CONF, ... load code): none at all.
    given = sorted([*server.env, *server.pass_env])
    if given:
        return (f"listed as {entry!r}, but it sets or passes {', '.join(given)} in its "
                "environment (a listed command runs as listed: no env, no pass_env)")
    return None


def refused_commands(config: SessionConfig, allowed: Sequence[str]) -> list[str]:
    """What in ``config`` runs a command ``allowed`` does not admit, each said with
    where it is (``plan.steps[0].run``) and why; empty when all may run."""
    refused: list[str] = []
    shell = ANY in allowed or SHELL in allowed
    if config.plan is not None and not shell:
        for i, step in enumerate(config.plan.steps):
            if isinstance(step.run, str):
                refused.append(f"plan.steps[{i}].run (a shell command)")
            if isinstance(step.verify, VerifyCmd):
                refused.append(f"plan.steps[{i}].verify.cmd (a shell command)")
    driver, tools = ("agent", config.agent.tools) if config.agent is not None else (
        "plan", config.plan.tools if config.plan is not None else [])
    for i, server in enumerate(tools):
        why = _tool_refusal(server, allowed)
        if why is not None:
            refused.append(f"{driver}.tools[{i}] ({server.name!r}, a tool server started "
                           f"from a command: {why})")
    return refused


def refusal_message(refused: list[str], allowed: Sequence[str]) -> str:
    now = ", ".join(repr(e) for e in allowed) or "nothing"
    return (f"this session config runs commands this server does not allow: "
            f"{'; '.join(refused)}. Allowed now: {now}. An operator allows commands with "
            f"{SETTING} (`shell` for plan steps' commands, a command's first words for a "
            "tool server, `*` for any; docs/security.md, \"Who may run code\"). "
            "Nothing was started")
