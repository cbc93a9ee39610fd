"""TelemetryRuns as OpenTelemetry spans (``opentelemetry-sdk``).

Each ended run becomes one ``ReadableSpan`` built directly, with the run's own
trace and span ids (the NDJSON events' ids: no random id generator involved) and
the log's start and end times, so exporting the same log twice gives the same
spans. LLM calls carry the OTel GenAI attributes (``gen_ai.operation.name`` =
``chat``, ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.usage.*``,
``gen_ai.response.finish_reasons``); every span has ``hitlflow.*`` attributes.

:class:`SpanSink` hands spans to an exporter through a span processor (batched in
the exporter service); :func:`otlp_exporter_from_env` builds the OTLP exporter
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set, importing
the OTLP package only then.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from observation.telemetry.model import Run, TelemetryRun

SCOPE = InstrumentationScope("hitlflow.telemetry", "1")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: gen_ai.provider.name for the configured providers (the OpenAI-compatible one
#: speaks OpenAI's API; the scripted one is hitlflow's own).
GEN_AI_PROVIDERS = {"openai": "openai", "scripted": "hitlflow.scripted"}


class TelemetryConfigError(Exception):
    """OpenTelemetry export is asked for (environment) but cannot be set up."""


def time_ns(ts: str) -> int:
    """Nanoseconds since the epoch of an ISO 8601 time (exact to the microsecond)."""
    dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=False,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _clean(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """OTel attribute values: str, bool, int, float or lists of them; no None."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if v is None:
            continue
        if isinstance(v, list | tuple):
            v = [x if isinstance(x, str | bool | int | float) else str(x) for x in v
                 if x is not None]
        elif not isinstance(v, str | bool | int | float):
            v = str(v)
        out[k] = v
    return out


def gen_ai_attributes(a: Mapping[str, Any]) -> dict[str, Any]:
    """The OTel GenAI semantic-convention attributes of an LLM call run."""
    out = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": GEN_AI_PROVIDERS.get(a.get("provider") or "", a.get("provider")),
        "gen_ai.request.model": a.get("model"),
        "gen_ai.request.temperature": a.get("temperature"),
        "gen_ai.request.max_tokens": a.get("max_tokens"),
        "gen_ai.usage.input_tokens": a.get("input_tokens"),
        "gen_ai.usage.output_tokens": a.get("output_tokens"),
        "gen_ai.response.finish_reasons": [a["finish_reason"]] if a.get("finish_reason")
        else None,
        "error.type": a.get("error_class"),
    }
    url = urlsplit(a.get("provider_base_url") or "")
    if url.scheme in ("http", "https") and url.hostname:
        out["server.address"] = url.hostname
        out["server.port"] = url.port or (443 if url.scheme == "https" else 80)
    return out


def span_name(run: TelemetryRun | Run) -> str:
    if run.job_type == "llm_call":  # GenAI convention: "{operation} {model}"
        return f"chat {run.attributes.get('model') or ''}".strip()
    return run.name


def run_attributes(run: TelemetryRun | Run) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "hitlflow.session_id": run.session_id, "hitlflow.run_id": run.run_id,
        "hitlflow.parent_run_id": run.parent_run_id, "hitlflow.job_type": run.job_type,
        "hitlflow.status": run.status,
        **{f"hitlflow.{k}": v for k, v in run.attributes.items()},
    }
    if run.job_type == "llm_call":
        attrs.update(gen_ai_attributes(run.attributes))
        attrs["gen_ai.conversation.id"] = run.session_id
    return _clean(attrs)


def to_span(run: TelemetryRun | Run, resource: Resource | None = None) -> ReadableSpan:
    """The span of a run (ended or not: an open run's end time is left unset)."""
    status = Status(StatusCode.UNSET)
    if run.status == "failed":
        reason = run.attributes.get("error_summary") or run.attributes.get(
            "failure_reason") or run.attributes.get("error_message") or run.status
        status = Status(StatusCode.ERROR, str(reason)[:500])
    elif run.status == "succeeded":
        status = Status(StatusCode.OK)
    start = run.started_at or run.attributes.get("queued_at") or run.ended_at or run.updated_at
    parent = _context(run.trace_id, run.parent_span_id) if run.parent_span_id else None
    a = run.attributes
    # a fork's session span links to its parent session's (issue 27)
    links = [Link(_context(a["forked_from_trace_id"], a["forked_from_span_id"]),
                  {"hitlflow.link": "forked_from", "hitlflow.parent_seq": a.get(
                      "forked_from_seq") or 0})] \
        if a.get("forked_from_trace_id") and a.get("forked_from_span_id") else []
    return ReadableSpan(
        name=span_name(run), context=_context(run.trace_id, run.span_id), parent=parent,
        links=links,
        resource=resource or default_resource(), attributes=run_attributes(run),
        kind=SpanKind.CLIENT if run.job_type == "llm_call" else SpanKind.INTERNAL,
        status=status, start_time=time_ns(start),
        end_time=time_ns(run.ended_at) if run.ended_at else None,
        instrumentation_scope=SCOPE)


def default_resource() -> Resource:
    """``service.name`` hitlflow unless ``OTEL_SERVICE_NAME`` says otherwise."""
    return Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "hitlflow"})


class SpanSink:
    """Exports the spans of runs through ``processor`` (a batch processor by default)."""

    def __init__(self, exporter: SpanExporter, *, batch: bool = True,
                 resource: Resource | None = None) -> None:
        self.processor: SpanProcessor = (BatchSpanProcessor(exporter) if batch
                                         else SimpleSpanProcessor(exporter))
        self.resource = resource or default_resource()

    def export(self, runs: Iterable[TelemetryRun | Run]) -> None:
        for run in runs:
            self.processor.on_end(to_span(run, self.resource))

    def flush(self, timeout_ms: int = 30_000) -> bool:
        return self.processor.force_flush(timeout_ms)

    def shutdown(self) -> None:
        self.processor.shutdown()


def otlp_configured(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def otlp_exporter_from_env(env: Mapping[str, str] | None = None) -> SpanExporter | None:
    """The OTLP span exporter when the environment asks for one, else None: the
    endpoint from ``env`` (default ``os.environ``), headers, timeout and TLS from the
    standard variables; ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` picks
    ``http/protobuf`` (the default) or ``grpc``."""
    env = os.environ if env is None else env
    if not otlp_configured(env):
        return None
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    package = {"http/protobuf": "opentelemetry-exporter-otlp-proto-http",
               "grpc": "opentelemetry-exporter-otlp-proto-grpc"}.get(protocol)
    if package is None:
        raise TelemetryConfigError(f"OTLP protocol {protocol!r} is not supported "
                                   "(http/protobuf or grpc)")
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[no-redef]
                OTLPSpanExporter,
            )
    except ImportError as err:
        raise TelemetryConfigError(
            f"OTEL_EXPORTER_OTLP_ENDPOINT is set but {package} is not installed "
            f"(pip install {package}): {err}") from None
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not endpoint:
        endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"]
        if protocol != "grpc":
            endpoint = endpoint.rstrip("/") + "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint)
