"""An update the server aborts before the workflow took it (``WorkflowNotReady``, e.g.
a reply that came while the workflow task continuing the session as new at a wait was
completing) is sent again: nothing was applied. Every other error is the answer at once.

The race itself cannot be caused on demand against the real server (it fell in about one
run in ten of ``tests/observation/test_fork_plan.py`` on a loaded machine), so the server's
answer is built here from the bytes it sent then, and the sender is a plain coroutine."""

from __future__ import annotations

import pytest
from google.rpc import status_pb2
from temporalio.service import RPCError, RPCStatusCode

from api.http import errors
from api.http.errors import is_update_not_ready, retry_not_ready

#: The google.rpc.Status the dev server sent with the aborted update (as recorded).
NOT_READY_STATUS = (
    b"\x08\t\x12TUnable to perform workflow execution update due to unexpected workflow "
    b"task failure.\x1aJ\nHtype.googleapis.com/temporal.api.errordetails.v1."
    b"WorkflowNotReadyFailure")
MESSAGE = "Unable to perform workflow execution update due to unexpected workflow task failure."


def not_ready() -> RPCError:
    return RPCError(MESSAGE, RPCStatusCode.FAILED_PRECONDITION, NOT_READY_STATUS)


def test_the_recorded_answer_is_recognised_and_others_are_not():
    assert status_pb2.Status.FromString(NOT_READY_STATUS).code == RPCStatusCode.FAILED_PRECONDITION
    assert is_update_not_ready(not_ready())
    failing = status_pb2.Status(code=9, message="Workflow Task in failed state.")
    assert not is_update_not_ready(RPCError("Workflow Task in failed state.",
                                            RPCStatusCode.FAILED_PRECONDITION,
                                            failing.SerializeToString()))
    assert not is_update_not_ready(RPCError(MESSAGE, RPCStatusCode.UNAVAILABLE,
                                            NOT_READY_STATUS))
    assert not is_update_not_ready(RPCError(MESSAGE, RPCStatusCode.FAILED_PRECONDITION,
                                            b"\xff not a status"))
    assert not is_update_not_ready(ValueError(MESSAGE)) and not is_update_not_ready(None)


class Sender:
    """Answers with ``outcomes`` in turn (an exception is raised), counting the sends."""

    def __init__(self, *outcomes: object) -> None:
        self.outcomes, self.sent = list(outcomes), 0

    async def __call__(self) -> object:
        self.sent += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


@pytest.fixture(autouse=True)
def no_waits(monkeypatch):
    monkeypatch.setattr(errors, "NOT_READY_RETRY_S", (0.0, 0.0, 0.0))


async def test_an_update_aborted_as_not_ready_is_sent_again():
    send = Sender(not_ready(), not_ready(), "ack")
    assert await retry_not_ready(send) == "ack" and send.sent == 3


async def test_other_errors_are_the_answer_at_once():
    failing = RPCError("Workflow Task in failed state.", RPCStatusCode.FAILED_PRECONDITION,
                       b"")
    send = Sender(failing, "never")
    with pytest.raises(RPCError, match="failed state"):
        await retry_not_ready(send)
    assert send.sent == 1
    send = Sender(not_ready(), KeyError("other"), "never")
    with pytest.raises(KeyError):
        await retry_not_ready(send)
    assert send.sent == 2


async def test_it_gives_up_after_its_retries():
    send = Sender(*[not_ready()] * 5)
    with pytest.raises(RPCError, match="unexpected workflow task failure"):
        await retry_not_ready(send)
    assert send.sent == len(errors.NOT_READY_RETRY_S) + 1 == 4
