"""Central telemetry (seed 003): TelemetryRuns projected from the audit log.

One parent run per session and one child per reasoning step, work item (tool
call, request to the person, plan step), gate run and LLM call
(``job_type = "llm_call"``), with status, start and end times and ``context_json``
holding the ``trace_id``/``span_id`` of the NDJSON events (``observation.exporter.ids``).

* pure: :class:`TelemetryRun`, :class:`TelemetryProjector`, :func:`project`
* store: :class:`TelemetryStore` (``<data_dir>/telemetry.sqlite``), :class:`TelemetryStoreError`
* spans: :func:`to_span`, :class:`SpanSink`, :func:`otlp_exporter_from_env`
* the exporter's hook: :class:`Telemetry`, :class:`SessionTelemetry`,
  :func:`start_telemetry`, :func:`sync_store`, :func:`rebuild_store`

``otel`` and ``hook`` import the OpenTelemetry SDK; import them from their modules
(``observation.telemetry.otel``) where that matters.
"""

from observation.telemetry.model import ENDED, JOB_TYPES, STATUSES, TelemetryRun, run_id
from observation.telemetry.project import ProjectionError, TelemetryProjector, project
from observation.telemetry.store import STORE_NAME, TelemetryStore, TelemetryStoreError

__all__ = [
    "ENDED", "JOB_TYPES", "STATUSES", "STORE_NAME", "ProjectionError", "TelemetryProjector",
    "TelemetryRun", "TelemetryStore", "TelemetryStoreError", "project", "run_id",
]
