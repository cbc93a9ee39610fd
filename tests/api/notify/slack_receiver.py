"""A Slack-compatible incoming webhook for the tests: a real HTTP server on 127.0.0.1
(in a thread) that takes POSTs at its secret path only, checks each body's Block Kit
shape with :func:`block_kit_problems` and answers like Slack (``ok`` with 200,
``invalid_blocks`` with 400 for a body that is not valid Block Kit, ``no_service`` with
404 elsewhere), or as the test tells it (``answers``)."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The block types Slack's messages take (https://api.slack.com/reference/block-kit/blocks).
BLOCK_TYPES = frozenset({"actions", "context", "divider", "file", "header", "image", "input",
                         "rich_text", "section", "video"})
TEXT_TYPES = frozenset({"mrkdwn", "plain_text"})


def _text_problems(where: str, obj: Any, limit: int, only: str | None = None) -> list[str]:
    if not isinstance(obj, dict):
        return [f"{where}: a text object must be an object, not {type(obj).__name__}"]
    out = []
    kind = obj.get("type")
    if kind not in TEXT_TYPES or (only is not None and kind != only):
        out.append(f"{where}.type: {kind!r} is not {only or ' or '.join(sorted(TEXT_TYPES))}")
    allowed = {"type", "text", "emoji" if kind == "plain_text" else "verbatim"}
    if extra := set(obj) - allowed:
        out.append(f"{where}: unknown keys {sorted(extra)}")
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        out.append(f"{where}.text: must be a non-empty string")
    elif len(text) > limit:
        out.append(f"{where}.text: {len(text)} characters, more than {limit}")
    return out


def _button_problems(where: str, el: Any) -> list[str]:
    if not isinstance(el, dict) or el.get("type") != "button":
        return [f"{where}: not a button"]
    out = _text_problems(f"{where}.text", el.get("text"), 75, only="plain_text")
    if extra := set(el) - {"type", "text", "url", "action_id", "style", "value",
                           "confirm", "accessibility_label"}:
        out.append(f"{where}: unknown keys {sorted(extra)}")
    url = el.get("url")
    if url is not None and (not isinstance(url, str) or not url or len(url) > 3000):
        out.append(f"{where}.url: must be a string of 1 to 3000 characters")
    if "action_id" in el and (not isinstance(el["action_id"], str)
                              or not 1 <= len(el["action_id"]) <= 255):
        out.append(f"{where}.action_id: must be 1 to 255 characters")
    if el.get("style") not in (None, "primary", "danger"):
        out.append(f"{where}.style: {el.get('style')!r} is not primary or danger")
    return out


def block_kit_problems(payload: Any) -> list[str]:
    """What is wrong with ``payload`` as an incoming webhook's Block Kit message (an
    empty list: nothing). Checks the blocks list (1 to 50), each block's type, text
    objects ``{type: mrkdwn|plain_text, text}``, buttons ``{type: button, text:
    plain_text, url}`` and Slack's length limits (header 150, section 3000, context
    elements 10, button text 75, URL 3000, block_id 255 and unique)."""
    if not isinstance(payload, dict):
        return ["the body must be a JSON object"]
    out = []
    if "text" in payload and (not isinstance(payload["text"], str) or not payload["text"]):
        out.append("text: the fallback text must be a non-empty string")
    blocks = payload.get("blocks")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= 50:
        return [*out, "blocks: must be a list of 1 to 50 blocks"]
    block_ids: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"blocks[{i}]"
        if not isinstance(block, dict):
            out.append(f"{where}: must be an object")
            continue
        kind = block.get("type")
        if kind not in BLOCK_TYPES:
            out.append(f"{where}.type: {kind!r} is not a block type")
            continue
        if "block_id" in block:
            bid = block["block_id"]
            if not isinstance(bid, str) or not 1 <= len(bid) <= 255 or bid in block_ids:
                out.append(f"{where}.block_id: must be 1 to 255 characters and unique")
            else:
                block_ids.add(bid)
        if kind == "header":
            out += _text_problems(f"{where}.text", block.get("text"), 150, only="plain_text")
        elif kind == "section":
            if "text" not in block and "fields" not in block:
                out.append(f"{where}: a section needs text or fields")
            if "text" in block:
                out += _text_problems(f"{where}.text", block["text"], 3000)
            for j, f in enumerate(block.get("fields") or []):
                out += _text_problems(f"{where}.fields[{j}]", f, 2000)
        elif kind == "context":
            els = block.get("elements")
            if not isinstance(els, list) or not 1 <= len(els) <= 10:
                out.append(f"{where}.elements: must be a list of 1 to 10 elements")
            else:
                for j, el in enumerate(els):
                    out += _text_problems(f"{where}.elements[{j}]", el, 3000)
        elif kind == "actions":
            els = block.get("elements")
            if not isinstance(els, list) or not 1 <= len(els) <= 25:
                out.append(f"{where}.elements: must be a list of 1 to 25 elements")
            else:
                ids = [el.get("action_id") for el in els if isinstance(el, dict)]
                if len([x for x in ids if x]) != len({x for x in ids if x}):
                    out.append(f"{where}: action_ids must be unique")
                for j, el in enumerate(els):
                    out += _button_problems(f"{where}.elements[{j}]", el)
    return out


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


@dataclass
class SlackReceiver:
    url: str  # the secret webhook URL (its path is the secret)
    base: str  # http://127.0.0.1:PORT
    received: list[Received] = field(default_factory=list)
    # (status, body) answers to give, in turn, before the usual ones
    answers: list[tuple[int, str]] = field(default_factory=list)


@contextlib.contextmanager
def slack_receiver() -> Iterator[SlackReceiver]:
    secret = f"/services/T0TEST/B0TEST/{secrets.token_urlsafe(18)}"
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            with lock:
                receiver.received.append(Received(self.path, dict(self.headers), body))
                told = receiver.answers.pop(0) if receiver.answers else None
            if told is not None:
                status, text = told
            elif self.path != secret:
                status, text = 404, "no_service"
            else:
                try:
                    problems = block_kit_problems(json.loads(body))
                except ValueError:
                    problems = ["not JSON"]
                status, text = (200, "ok") if not problems else (400, "invalid_blocks")
            data = text.encode()
            self.send_response(status)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    receiver = SlackReceiver(url=base + secret, base=base)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="slack-receiver",
                              daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
