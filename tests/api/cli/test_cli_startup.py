"""The command line starts at once: its entry module, and ``--help`` of the root and of
the client commands, load none of what the process commands run (the worker, the
exporter, the openai package, Temporal's worker). What it loads, not how long it
takes: timings belong to the README's figures, not to a test."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Never loaded by the entry module, nor by ``--help`` of a client command.
HEAVY = ("api.runtime.worker", "observation.exporter", "openai", "temporalio.worker",
         "temporalio.client", "api.http.app", "observation.telemetry")

LOADED = """
import json, sys
argv = {argv!r}
import api.cli.main
if argv:
    sys.argv = ["hitlflow", *argv]
    try:
        api.cli.main.main()
    except SystemExit:
        pass
print("\\nLOADED " + json.dumps(sorted(sys.modules)))
"""


def loaded(*argv: str) -> set[str]:
    r = subprocess.run([sys.executable, "-c", LOADED.format(argv=list(argv))],
                       capture_output=True, text=True, timeout=120, check=True,
                       env={"PATH": "/usr/bin:/bin", "COLUMNS": "100"})
    return set(json.loads(r.stdout.rpartition("\nLOADED ")[2]))


@pytest.mark.parametrize("argv", [(), ("--help",), ("session", "list", "--help"),
                                  ("session", "show", "--help"),
                                  ("session", "approve", "--help"), ("log", "--help")])
def test_the_command_line_loads_only_what_it_uses(argv):
    modules = loaded(*argv)
    assert "api.cli.main" in modules
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or any(
        m == h or m.startswith(h + ".") for h in HEAVY))
    assert not heavy, f"`hitlflow {' '.join(argv)}` loads {heavy}: import them in the command"


def test_a_lazy_group_loads_when_named():
    assert "api.cli.telemetry" not in loaded("--help")
    assert "api.cli.telemetry" in loaded("telemetry", "runs", "--help")
