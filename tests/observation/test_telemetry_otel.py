"""Telemetry runs as OpenTelemetry spans: the NDJSON events' ids, parent/child
structure, GenAI attributes on LLM calls, exported live as operations end (not
only when the session ends), never twice; OTLP over HTTP when configured."""

from __future__ import annotations

import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from observation.exporter import Chain, LogWriter, SessionExport, export_history, map_history
from observation.exporter.decode import load_history
from observation.exporter.verify import read_lines, verify_lines
from observation.telemetry import project
from observation.telemetry.hook import SessionTelemetry
from observation.telemetry.otel import (
    SpanSink,
    TelemetryConfigError,
    otlp_exporter_from_env,
    time_ns,
    to_span,
)

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SID, EVENTS = load_history((HISTORIES / "demo.json").read_text())
HAS_OTLP_HTTP = importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None


def hexid(n: int, width: int) -> str:
    return format(n, f"0{width}x")


def sink() -> tuple[SpanSink, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    return SpanSink(memory, batch=False), memory


def log_lines(runs_dir: Path) -> list[dict]:
    return list(verify_lines(read_lines(runs_dir / SID / "events.ndjson")))


def test_spans_carry_the_log_ids_and_the_run_tree(tmp_path):
    spans, memory = sink()
    export_history(SID, EVENTS, tmp_path, SessionTelemetry(SID, None, spans))
    got = memory.get_finished_spans()
    log = log_lines(tmp_path)
    runs = project(SID, log)
    assert len(got) == len(runs)  # every run ended, each exported once
    by_id = {hexid(s.context.span_id, 16): s for s in got}
    for e in log:  # each event's span is a span with the event's ids
        s = by_id[e["span_id"]]
        assert hexid(s.context.trace_id, 32) == e["trace_id"]
        parent = hexid(s.parent.span_id, 16) if s.parent else None
        assert parent == e["parent_span_id"]
    roots = [s for s in got if s.parent is None]
    assert [s.attributes["hitlflow.job_type"] for s in roots] == ["session"]
    assert all(hexid(s.parent.span_id, 16) in by_id for s in got if s.parent)
    for r in runs:
        s = by_id[r.span_id]
        assert (s.start_time, s.end_time) == (time_ns(r.started_at), time_ns(r.ended_at))
        assert s.attributes["hitlflow.run_id"] == r.run_id
        assert s.attributes.get("hitlflow.parent_run_id") == r.parent_run_id
    assert roots[0].status.status_code is StatusCode.OK


def test_llm_call_spans_have_the_gen_ai_attributes(tmp_path):
    spans, memory = sink()
    export_history(SID, EVENTS, tmp_path, SessionTelemetry(SID, None, spans))
    log = log_lines(tmp_path)
    started = {e["span_id"]: e["payload"] for e in log if e["type"] == "LLM_CALL_STARTED"}
    finished = {e["span_id"]: e["payload"] for e in log if e["type"] == "LLM_CALL_FINISHED"}
    llm = [s for s in memory.get_finished_spans()
           if s.attributes["hitlflow.job_type"] == "llm_call"]
    assert len(llm) == len(started) > 0
    for s in llm:
        a, sp = s.attributes, hexid(s.context.span_id, 16)
        st, fin = started[sp], finished[sp]
        assert s.kind is SpanKind.CLIENT and s.name == f"chat {st['model']}"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "hitlflow.scripted"
        assert a["gen_ai.request.model"] == st["model"]
        assert a["gen_ai.request.max_tokens"] == st["max_tokens"]
        assert a["gen_ai.usage.input_tokens"] == fin["token_usage"]["input_tokens"]
        assert a["gen_ai.usage.output_tokens"] == fin["token_usage"]["output_tokens"]
        assert tuple(a["gen_ai.response.finish_reasons"]) == (fin["finish_reason"],)
        assert a["gen_ai.conversation.id"] == SID
        assert s.attributes["hitlflow.call_id"] == st["call_id"]


def test_spans_of_an_open_session_go_out_as_they_end_and_never_twice(tmp_path):
    """Export half the history: the ended children are exported, the session's
    span is not (it is open); restart and finish: the rest, none again."""
    spans, memory = sink()
    half = len(EVENTS) // 2
    with LogWriter(tmp_path / SID, SessionTelemetry(SID, None, spans)) as w:
        export = SessionExport(w, SID)
        for e in EVENTS[:half]:
            export.feed(e, page_end=True)
    first = memory.get_finished_spans()
    assert first and all(s.parent is not None for s in first)  # children only
    assert all(s.end_time is not None for s in first)
    memory.clear()
    export_history(SID, EVENTS, tmp_path, SessionTelemetry(SID, None, spans))
    second = memory.get_finished_spans()
    assert [s.parent for s in second].count(None) == 1  # the session's span, at its end
    ids_first = {s.context.span_id for s in first}
    assert not ids_first & {s.context.span_id for s in second}
    assert len(first) + len(second) == len(project(SID, log_lines(tmp_path)))
    memory.clear()
    export_history(SID, EVENTS, tmp_path, SessionTelemetry(SID, None, spans))  # replay only
    assert memory.get_finished_spans() == ()


def test_the_same_run_is_the_same_span():
    mapped = [e.model_dump() for e in Chain().link_all(map_history(SID, EVENTS))]
    runs = project(SID, [json.loads(json.dumps(e)) for e in mapped])
    for r in runs:
        a, b = to_span(r), to_span(r.model_copy(deep=True))
        assert (a.name, a.context, a.parent, a.attributes, a.start_time, a.end_time) == (
            b.name, b.context, b.parent, b.attributes, b.start_time, b.end_time)


def test_otlp_is_used_only_when_configured():
    assert otlp_exporter_from_env({}) is None
    with pytest.raises(TelemetryConfigError, match="not supported"):
        otlp_exporter_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318",
                                "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"})
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    if HAS_OTLP_HTTP:
        assert otlp_exporter_from_env(env) is not None
    else:
        with pytest.raises(TelemetryConfigError, match="opentelemetry-exporter-otlp-proto-http"):
            otlp_exporter_from_env(env)


@pytest.mark.skipif(not HAS_OTLP_HTTP, reason="opentelemetry-exporter-otlp-proto-http "
                    "is not installed")
def test_spans_reach_an_otlp_http_collector(tmp_path):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    bodies: list[tuple[str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}"}
        spans = SpanSink(otlp_exporter_from_env(env))  # batched, as in the service
        export_history(SID, EVENTS, tmp_path, SessionTelemetry(SID, None, spans))
        assert spans.flush()
        spans.shutdown()
    finally:
        server.shutdown()
        thread.join()
    got = []
    assert bodies and {path for path, _ in bodies} == {"/v1/traces"}
    for _, body in bodies:
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            assert {a.key: a.value.string_value for a in rs.resource.attributes
                    }["service.name"] == "hitlflow"
            for ss in rs.scope_spans:
                got += ss.spans
    want = {r.span_id: r for r in project(SID, log_lines(tmp_path))}
    assert {s.span_id.hex() for s in got} == set(want)
    for s in got:
        r = want[s.span_id.hex()]
        assert s.trace_id.hex() == r.trace_id
        assert (s.parent_span_id.hex() or None) == r.parent_span_id
