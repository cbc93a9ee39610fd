# This stands in for a paid LLM API, which cannot run here (no network); the client
# under test is the real openai SDK over real HTTP.
"""A small OpenAI-compatible chat-completions server for tests.

A test queues what the next requests get (``reply_text``, ``reply_tool_calls``,
``reply_error``), optionally sets the key the server expects, runs the client,
then reads ``requests`` (every request received: headers and JSON body).

A request with ``"stream": true`` gets its reply as the API streams it: SSE chunks
(``data: {...choices[0].delta...}``; the text in ``pieces``, each tool call's
arguments in two halves), one with the ``finish_reason``, one with the ``usage``
when ``stream_options.include_usage`` asks for it, then ``data: [DONE]``. With
``hold`` (a ``threading.Event``) the stream stops after ``hold_after`` text pieces
until the test sets it: a generation caught mid-answer.

The server runs uvicorn in a background thread on a socket bound here, on
127.0.0.1 and a free port, before the thread starts: the port is known and
accepts connections at once, so nothing has to wait for the server to come up.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

__all__ = ["FakeOpenAIServer", "RecordedRequest", "tool_call"]


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class _Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] | None = None
    pieces: list[str] | None = None  # the text as streamed (default: ~3 pieces)
    hold: threading.Event | None = None
    hold_after: int = 1


def text_pieces(text: str) -> list[str]:
    """``text`` in about three pieces (at least one per character up to three)."""
    if not text:
        return []
    size = max(1, -(-len(text) // 3))
    return [text[i:i + size] for i in range(0, len(text), size)]


def tool_call(call_id: str, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    """One tool call as an OpenAI response carries it (``arguments`` is a JSON string)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def _error_body(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


@dataclass
class FakeOpenAIServer:
    """Scripted behaviour for ``POST /v1/chat/completions``; thread-safe."""

    expected_key: str | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    _replies: deque[_Reply] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None
    _port: int = 0

    # -- configuring ------------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            self.expected_key = None
            self.requests.clear()
            self._replies.clear()

    def reply_text(
        self,
        text: str,
        *,
        finish_reason: str = "stop",
        usage: tuple[int, int] = (12, 5),
        model: str = "fake-model",
        pieces: list[str] | None = None,
        hold: threading.Event | None = None,
        hold_after: int = 1,
    ) -> None:
        """``pieces``: how a stream sends ``text`` (joined, they must be it); ``hold``:
        a streamed reply waits for it after ``hold_after`` pieces (-1: before its
        first chunk)."""
        if pieces is not None and "".join(pieces) != text:
            raise ValueError("the pieces must join to the text")
        with self._lock:
            self._replies.append(_Reply(
                200, self._completion({"content": text}, finish_reason, usage, model),
                pieces=pieces, hold=hold, hold_after=hold_after))

    def reply_tool_calls(
        self,
        calls: list[dict[str, Any]],
        *,
        text: str | None = None,
        usage: tuple[int, int] = (20, 9),
        model: str = "fake-model",
    ) -> None:
        message = {"content": text, "tool_calls": calls}
        self._queue(200, self._completion(message, "tool_calls", usage, model))

    def reply_error(self, status: int, message: str = "", *, type_: str = "api_error",
                    headers: dict[str, str] | None = None) -> None:
        """An error reply; ``headers`` e.g. ``{"retry-after": "20"}`` for a rate limit."""
        self._queue(status, _error_body(message or f"fake error {status}", type_), headers)

    def _queue(self, status: int, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> None:
        with self._lock:
            self._replies.append(_Reply(status, body, headers))

    @staticmethod
    def _completion(
        message: dict[str, Any], finish_reason: str, usage: tuple[int, int], model: str
    ) -> dict[str, Any]:
        prompt, completion = usage
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", **message},
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    @staticmethod
    def _chunks(reply: _Reply, include_usage: bool) -> list[dict[str, Any] | str]:
        """The streamed form of a completion: chunk bodies, ``"hold"`` where the
        stream waits for the test."""
        body = reply.body
        (choice,) = body["choices"]
        message = choice["message"]

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any
                  ) -> dict[str, Any]:
            return {"id": body["id"], "object": "chat.completion.chunk",
                    "created": body["created"], "model": body["model"],
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                 "logprobs": None}], **extra}

        out: list[dict[str, Any] | str] = ["hold"] if reply.hold is not None \
            and reply.hold_after < 0 else []  # before anything, even the role
        out.append(chunk({"role": "assistant", "content": ""}))
        pieces = reply.pieces if reply.pieces is not None \
            else text_pieces(message.get("content") or "")
        for i, piece in enumerate(pieces):
            if reply.hold is not None and i == reply.hold_after:
                out.append("hold")
            out.append(chunk({"content": piece}))
        for index, call in enumerate(message.get("tool_calls") or []):
            raw = call["function"]["arguments"]
            half = len(raw) // 2
            out.append(chunk({"tool_calls": [{"index": index, "id": call["id"],
                                              "type": "function", "function": {
                                                  "name": call["function"]["name"],
                                                  "arguments": raw[:half]}}]}))
            out.append(chunk({"tool_calls": [{"index": index,
                                              "function": {"arguments": raw[half:]}}]}))
        out.append(chunk({}, choice["finish_reason"]))
        if include_usage:
            out.append({**chunk({}), "choices": [], "usage": body["usage"]})
        return out

    def _stream(self, reply: _Reply, include_usage: bool) -> Response:
        async def frames() -> AsyncIterator[bytes]:
            for item in self._chunks(reply, include_usage):
                if item == "hold":
                    assert reply.hold is not None
                    await asyncio.to_thread(reply.hold.wait, 30)  # a forgotten hold ends
                    continue
                yield f"data: {json.dumps(item)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")

    # -- serving ----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Response:
            raw = await request.body()
            try:
                body: Any = json.loads(raw)
            except json.JSONDecodeError:
                body = raw.decode("utf-8", "replace")
            with self._lock:
                self.requests.append(
                    RecordedRequest(request.method, request.url.path, dict(request.headers), body)
                )
                expected = self.expected_key
                authorized = expected is None or (
                    request.headers.get("authorization") == f"Bearer {expected}"
                )
                # A rejected request leaves the queued replies for the next one.
                reply = self._replies.popleft() if authorized and self._replies else None
            if not authorized:
                body = _error_body(
                    "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
                )
                return JSONResponse(body, status_code=401)
            if reply is None:
                return JSONResponse(
                    _error_body("fake server: no reply queued for this request", "fake_error"),
                    status_code=500,
                )
            if reply.status == 200 and isinstance(body, dict) and body.get("stream"):
                options = body.get("stream_options") or {}
                return self._stream(reply, bool(options.get("include_usage")))
            return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)

        return app

    def start(self) -> FakeOpenAIServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None
