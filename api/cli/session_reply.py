"""What the ``session`` commands share: the API client with its errors as exit codes,
and answering the pending request (ids by prefix, approve/reject per request kind,
returning once reads show the reply)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from api.cli.options import Stack, command_line, fail
from api.cli.session_view import reply_hints, short_id

if TYPE_CHECKING:
    from api.cli.client import ApiClient

READABLE_WITHIN_S = 30.0


def error(message: str, code: int = 1) -> NoReturn:
    """``error: <message>`` on stderr, exit ``code`` (1: the API said no; 2: usage)."""
    fail(f"error: {message}", code)


@contextmanager
def api_of(stack: Stack) -> Iterator[ApiClient]:
    from api.cli.client import ApiClientError

    client = stack.client()
    try:
        yield client
    except ApiClientError as err:
        error(f"{err.code}: {err.message}")
    finally:
        client.close()


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2))


def contract_ids(api: ApiClient, session_id: str, first: dict[str, Any]) -> list[str]:
    """Every contract id of the session (the pages after ``first``, the session's
    answer), and the pending request's ids."""
    ids = [c["execution_id"] for c in first.get("contracts") or []]
    cursor = first.get("next_cursor")
    while cursor:
        page = api.get(f"/api/sessions/{session_id}",
                       params={"cursor": cursor, "limit": 500})
        ids += [c["execution_id"] for c in page.get("contracts") or []]
        cursor = page.get("next_cursor")
    pending = first.get("pending") or {}
    ids += [x for x in (pending.get("execution_id"), pending.get("request_id")) if x]
    return list(dict.fromkeys(ids))


def resolve_id(given: str, known: list[str], what: str = "contract",
               unknown_ok: bool = False) -> str:
    """The one id in ``known`` that ``given`` starts (whole, or its part after
    ``<session id>.``); a clear error when several do, or none (``unknown_ok``: then
    ``given`` itself, for the API to say what became of it)."""
    if given in known:
        return given
    found = [x for x in known if x.startswith(given) or x.partition(".")[2].startswith(given)]
    if len(found) == 1:
        return found[0]
    if not found:
        if unknown_ok:
            return given
        error(f"no {what} of this session starts with {given!r}")
    shown = ", ".join(short_id(x) if x.partition(".")[2] else x for x in found[:6])
    error(f"{given!r} is ambiguous: {len(found)} {what}s start with it ({shown}"
                f"{', …' if len(found) > 6 else ''}); give more characters")


def send_reply(stack: Stack, session_id: str, body: dict[str, Any],
                decide: bool | None = None) -> None:
    """Answer the pending request. ``body["request_id"]`` may be a prefix, or absent
    (the pending one). ``decide``: approve (True) or reject (False) whatever the
    request's kind takes for it (``approve`` for approvals, ``choice`` for plan steps)."""
    with api_of(stack) as api:
        s = api.get(f"/api/sessions/{session_id}")
        pending = s.get("pending")
        given = body.get("request_id")
        if not given:
            if not pending:
                error(f"nothing is pending in session {session_id}")
            body["request_id"] = pending["request_id"]
        else:
            rid = resolve_id(given, contract_ids(api, session_id, s),
                             "request" if decide is None else "contract",
                             unknown_ok=decide is None)
            if pending and rid in (pending["request_id"], pending.get("execution_id")):
                rid = pending["request_id"]
            body["request_id"] = rid
        if decide is not None:
            body.update(decision(session_id, pending, body["request_id"], decide))
        if pending and pending["request_id"] == body["request_id"] and pending.get("digest"):
            # What was shown is what is answered: a request that changed since is a 409.
            body.setdefault("digest", pending["digest"])
            typer.echo(f"answering {pending['request_id']} ({pending['digest']})", err=True)
        ack = api.post(f"/api/sessions/{session_id}/reply", body)
        readable(api, session_id, ack)
    typer.echo(f"reply to {ack['request_id']} accepted")


def readable(api: ApiClient, session_id: str, ack: dict[str, Any] | None) -> None:
    """Return once reads show the write (its ``journal_seq``), so the next command
    (``wait``, ``show``, another reply) sees the session after it."""
    seq = (ack or {}).get("journal_seq")
    deadline = time.monotonic() + READABLE_WITHIN_S
    while seq and time.monotonic() < deadline:  # the API waits up to 2 s per read
        if not api.get(f"/api/sessions/{session_id}",
                       params={"min_journal_seq": seq, "limit": 1}).get("stale"):
            return


def decision(session_id: str, pending: dict | None, request_id: str,
              approve: bool) -> dict[str, Any]:
    """What approve / reject mean for the request that waits."""
    if pending is None or pending["request_id"] != request_id or \
            pending["kind"] in ("approval", "confirm"):
        return {"approve": approve}  # the API says why a stale one is refused
    if pending["kind"] in ("step", "window"):
        if approve:
            return {"choice": "approve"}
        error(f"a plan step is approved, skipped or reset, not rejected: "
                    f"{command_line('session', 'reply', session_id, '--choice', 'skip')} "
                    "(or --choice reset, reset_task)", 2)
    hints, _ = reply_hints(session_id, pending)
    error(f"the session waits for {pending['kind']}, not an approval: "
                f"{hints[0]}", 2)
