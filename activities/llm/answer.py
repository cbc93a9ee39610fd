"""The model's answer in our terms (text, tool calls, a request to the person, end),
its tool calls' arguments checked.

A tool call whose arguments are not a JSON object or do not fit the tool's input
schema (an invalid ``ask_user`` too), or that exceed the limits of JSON a session
holds (``workflows.limits``: nested too deep, a number JSON cannot carry), is a model
mistake, not a failure: it comes back with ``arguments_error`` set, and the workflow
tells the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from pydantic import ValidationError
from temporalio import activity

from activities.llm.failures import LLMResponseError
from activities.llm.payloads import sha256_json
from activities.llm.wire import ASK_USER, END_CONVERSATION, ToolNames
from workflows.config import EcsRequest, ToolCallRequest
from workflows.io import ToolSpec
from workflows.limits import DEFAULT_MAX_DEPTH, scan_json_text


def _parse_arguments(function_name: str, raw: str | None) -> tuple[dict[str, Any], str | None]:
    """The arguments as an object, or ``({}, why not)``: a model mistake that goes
    back to the model, not a failure of the call."""
    if raw is None or not raw.strip():
        return {}, None
    # Before the parser: it recurses, and history could not hold what it would make.
    beyond = scan_json_text(raw, DEFAULT_MAX_DEPTH)
    if beyond is not None:
        return {}, f"the arguments of {function_name} are refused: {beyond.message}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        sent = raw if len(raw) <= 200 else raw[:200] + "…"
        return {}, f"the arguments of {function_name} are not valid JSON ({exc}): {sent}"
    if not isinstance(value, dict):
        return {}, f"the arguments of {function_name} are not a JSON object"
    return value, None


def _schema_problem(function_name: str, schema: dict[str, Any],
                    arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit the tool's input schema, or None (also when the
    server's schema is itself invalid: then the server judges the call)."""
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        error = jsonschema.exceptions.best_match(cls(schema).iter_errors(arguments))
    except jsonschema.exceptions.SchemaError:
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return (f"the arguments of {function_name} do not fit its input schema"
            f"{f' at {where}' if where else ''}: {error.message}")


def check_arguments(calls: list[ToolCallRequest], tools: list[ToolSpec],
                    names: ToolNames) -> list[ToolCallRequest]:
    """Each call with ``arguments_error`` set where its arguments do not fit the
    input schema of the tool it names (calls already marked, and calls to tools
    not offered, are left as they are: the workflow judges those)."""
    out = []
    for call in calls:
        specs = [t for t in tools if t.name == call.tool
                 and (call.server is None or t.server == call.server)]
        server = specs[0].server if len(specs) == 1 else call.server
        fname = names.function_name(server, call.tool)  # the name the model knows
        if call.arguments_error is None and call.raw_arguments is not None:
            arguments, problem = _parse_arguments(fname, call.raw_arguments)
            call = call.model_copy(update={"arguments": arguments, "arguments_error": problem,
                                           "raw_arguments": call.raw_arguments if problem
                                           else None})
        if call.arguments_error is None and len(specs) == 1:
            problem = _schema_problem(fname, specs[0].input_schema, call.arguments)
            if problem is not None:
                call = call.model_copy(update={"arguments_error": problem})
        out.append(call)
    return out


@dataclass
class Answer:
    """The model's answer in our terms, before the telemetry is attached."""

    text: str | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    ecs_request: EcsRequest | None = None
    end: bool = False

    def output_hash(self) -> str:
        """sha256 of the answer's canonical JSON. An answer that is not Unicode text (a
        lone surrogate, e.g. ``\\ud800`` in a tool call's JSON arguments) has no UTF-8
        bytes: it cannot be hashed, recorded or logged, so it is refused."""
        try:
            return sha256_json(
                {
                    "text": self.text,
                    "tool_calls": [c.model_dump(mode="json") for c in self.tool_calls],
                    "ecs_request": self.ecs_request.model_dump(mode="json")
                    if self.ecs_request
                    else None,
                    "end": self.end,
                }
            )
        except UnicodeEncodeError:
            raise LLMResponseError(
                "the model's answer is not Unicode text: it holds a lone surrogate "
                "(a \\ud800-\\udfff escape without its pair), which UTF-8 cannot carry"
            ) from None


def answer_from_function_calls(
    text: str | None, calls: list[tuple[str, str, str | None]], names: ToolNames
) -> Answer:
    """``calls`` are ``(id, function name, raw JSON arguments)`` as the model sent them."""
    answer = Answer(text=text)
    for call_id, fname, raw in calls:
        arguments, problem = _parse_arguments(fname, raw)
        bad_raw = raw if problem is not None else None
        if fname == ASK_USER:
            if problem is None:
                try:
                    request = EcsRequest.model_validate(arguments)
                except ValidationError as exc:
                    reasons = "; ".join(
                        f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}"
                        for e in exc.errors())
                    problem = f"the ask_user request is invalid ({reasons})"
            if problem is not None:  # a mistake: it goes back to the model
                answer.tool_calls.append(ToolCallRequest(
                    id=call_id, tool=ASK_USER, arguments=arguments, arguments_error=problem,
                    raw_arguments=bad_raw))
                continue
            if answer.ecs_request is not None:
                activity.logger.warning("the model called ask_user twice; keeping the first")
                continue
            answer.ecs_request = request
        elif fname == END_CONVERSATION:
            answer.end = True
            final = arguments.get("final_message")
            if not answer.text and isinstance(final, str) and final:
                answer.text = final
        else:
            server, tool = names.resolve(fname)
            answer.tool_calls.append(ToolCallRequest(
                id=call_id, tool=tool or "(no name)", server=server, arguments=arguments,
                arguments_error=problem, raw_arguments=bad_raw))
    return answer
