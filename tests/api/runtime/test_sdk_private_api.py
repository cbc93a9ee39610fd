"""The two private parts of the Temporal SDK hitlflow uses, checked against the SDK
installed: the sandbox's ``_Instance`` (``api.runtime.sandbox`` subclasses it and builds
it as the stock runner does) and ``WorkflowExecution._from_raw_info``
(``api.http.routers.sessions`` lists sessions through visibility with it).
pyproject.toml pins temporalio below the next minor version; when a release changes
either, these fail and say what to look at before moving the pin."""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.client import WorkflowExecution
from temporalio.converter import DataConverter
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _Instance

from api.runtime.sandbox import CompiledSandboxRunner

SANDBOX = ("temporalio {v} changed the private sandbox class that api/runtime/sandbox.py "
           "subclasses ({what}): check CompiledSandboxRunner against the new _Instance (or go "
           "back to the stock SandboxedWorkflowRunner), then move the temporalio pin in "
           "pyproject.toml")
RAW_INFO = ("temporalio {v} changed WorkflowExecution._from_raw_info ({what}), which "
            "api/http/routers/sessions.py calls to list sessions through visibility: adapt "
            "_visibility_page, then move the temporalio pin in pyproject.toml")
SDK = version("temporalio")


def params(fn: object) -> list[str]:
    return [f"{'**' if p.kind is p.VAR_KEYWORD else ''}{p.name}"
            for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


def test_the_pin_keeps_the_sdk_below_its_next_minor_version():
    project = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    pin = next(d for d in project["project"]["dependencies"] if d.startswith("temporalio"))
    upper = re.search(r"<\s*(\d+)\.(\d+)", pin)
    assert upper, f"temporalio is not pinned below a version ({pin!r}); see this module"
    major, minor = (int(x) for x in SDK.split(".")[:2])
    assert (major, minor + 1) == (int(upper[1]), int(upper[2])), (
        f"the pin {pin!r} is not the next minor version after the installed {SDK}")


def test_the_sandbox_instance_is_built_and_entered_as_the_compiled_runner_expects():
    what = "__init__(instance_details, runner_class, restrictions)"
    assert params(_Instance.__init__) == ["self", "instance_details", "runner_class",
                                          "restrictions"], SANDBOX.format(v=SDK, what=what)
    for method, expected in [("_run_code", ["self", "code", "**extra_globals"]),
                             ("activate", ["self", "act"]),
                             ("get_serialization_context", ["self", "command_info"]),
                             ("get_external_store_context", ["self", "command_info"])]:
        assert callable(getattr(_Instance, method, None)) and \
            params(getattr(_Instance, method)) == expected, \
            SANDBOX.format(v=SDK, what=f"{method}({', '.join(expected[1:])})")
    # The stock runner builds its instance from these two attributes, as ours does.
    runner = CompiledSandboxRunner()
    assert isinstance(runner, SandboxedWorkflowRunner)
    assert hasattr(runner, "runner_class") and hasattr(runner, "restrictions"), \
        SANDBOX.format(v=SDK, what="SandboxedWorkflowRunner.runner_class/.restrictions")
    source = inspect.getsource(SandboxedWorkflowRunner.create_instance)
    assert "_Instance(det, self.runner_class, self.restrictions)" in source, \
        SANDBOX.format(v=SDK, what="how SandboxedWorkflowRunner.create_instance builds it")


def test_from_raw_info_makes_a_workflow_execution_of_a_visibility_row():
    assert params(WorkflowExecution._from_raw_info)[:3] == ["info", "namespace", "converter"], \
        RAW_INFO.format(v=SDK, what="its parameters")
    info = WorkflowExecutionInfo(task_queue="hitlflow-sessions")
    info.execution.workflow_id = "s-1"
    info.type.name = "SessionWorkflow"
    wf = WorkflowExecution._from_raw_info(info, "default", DataConverter.default)
    assert isinstance(wf, WorkflowExecution), RAW_INFO.format(v=SDK, what="what it returns")
    assert (wf.id, wf.workflow_type, wf.task_queue, wf.namespace) == (
        "s-1", "SessionWorkflow", "hitlflow-sessions", "default"), \
        RAW_INFO.format(v=SDK, what="the fields it fills")
    assert wf.typed_search_attributes is not None
