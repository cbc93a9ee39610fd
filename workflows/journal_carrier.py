"""The journal rides on the activity it precedes: a header, not a memo of its own.

The workflow writes the facts the exporter cannot read off history (its journal)
into history before every await. Before an activity they travel in the activity's
``hitlflow-journal`` header (in ActivityTaskScheduled, the same workflow task
completion, the same place in history), which saves one history event per activity
against an ``upsert_memo``; before a wait they still go into the memo. Sessions
started at ``Behaviour.JOURNAL_IN_HEADER`` or later do this; older histories
upsert a memo there and replay unchanged. Python's SDK
sets headers only through an interceptor: every worker and replayer of
``SessionWorkflow`` takes :data:`INTERCEPTORS` (the workflow fails its task, loudly,
without it: nothing is lost silently).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.worker import (
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

JOURNAL_HEADER = "hitlflow-journal"


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        take = getattr(workflow.instance(), "journal_for_activity", None)
        entries = take() if take is not None else None
        if entries:
            input.headers = {**input.headers,
                             JOURNAL_HEADER: workflow.payload_converter().to_payload(entries)}
        return super().start_activity(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class JournalCarrier(Interceptor):
    """Puts the workflow's pending journal entries into the next activity's header."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput
                                   ) -> type[WorkflowInboundInterceptor] | None:
        return _Inbound


INTERCEPTORS: list[Interceptor] = [JournalCarrier()]
