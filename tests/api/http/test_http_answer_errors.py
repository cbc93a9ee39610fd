"""The workflow's answer refusals (its reply validator's ApplicationError types, in
workflows.people) become one HTTP answer each: 403 naming the rule, 409 with the
conflict's code, 422 with the schema's errors; anything else stays the 409 it was."""

from __future__ import annotations

import json

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from api.http.errors import ApiError, error_response, from_temporal
from workflows import people


def _mapped(*details: object, type: str | None) -> ApiError:
    err = from_temporal(WorkflowUpdateFailedError(ApplicationError("no", *details, type=type)))
    assert err is not None
    return err


def test_forbidden_is_a_403_naming_the_rule():
    err = _mapped({"rule": "deletes", "code": "forbidden"}, type=people.ANSWER_FORBIDDEN)
    assert (err.status, err.code, err.extra) == (403, "forbidden", {"rule": "deletes"})
    assert _mapped(type=people.ANSWER_FORBIDDEN).extra == {"rule": "forbidden"}


@pytest.mark.parametrize("code", ["stale_digest", "already_approved"])
def test_a_conflict_is_a_409_with_its_code(code: str):
    err = _mapped({"code": code}, type=people.ANSWER_CONFLICT)
    assert (err.status, err.code, err.message) == (409, code, "no")


def test_invalid_arguments_are_a_422_with_the_schema_errors():
    errors = [{"path": ["name"], "message": "'x' is too short"}]
    err = _mapped({"code": "invalid_arguments", "errors": errors}, type="AnswerInvalid")
    assert (err.status, err.code, err.extra) == (422, "invalid_arguments", {"errors": errors})
    body = json.loads(error_response(err.status, err.code, err.message, extra=err.extra).body)
    assert body == {"error": {"code": "invalid_arguments", "message": "no",
                              "errors": errors}}


@pytest.mark.parametrize("details", [(), ("not a dict",), ({"rule": None},)])
def test_other_refusals_and_odd_details_stay_clear(details: tuple[object, ...]):
    assert _mapped(*details, type=None).status == 409
    assert _mapped(*details, type="SomethingElse").code == "refused"
    # Odd details of a known type still answer with its status and a usable body.
    assert _mapped(*details, type=people.ANSWER_FORBIDDEN).extra == {"rule": "forbidden"}
    assert _mapped(*details, type=people.ANSWER_CONFLICT).code == "conflict"


def test_an_error_body_without_extras_keeps_its_two_fields():
    body = json.loads(error_response(404, "not_found", "nope").body)
    assert body == {"error": {"code": "not_found", "message": "nope"}}
