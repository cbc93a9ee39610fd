"""A small MCP server over stdio that keeps notes as files in one directory.

It exists for the demo and the tests: its five tools cover every safety class
(read-only, reversible, at-most-once, irreversible) with honest annotations,
and it shows what an MCP server must do for "irreversible means once": honour
the idempotency key the worker sends in the request's ``_meta``.

Run: ``python -m activities.demo_notes_server --dir <notes_dir>``

Files it keeps next to the notes (dot files, so never a valid note name):
- ``.idempotency.json``: the result of every executed mutating call, by key;
  a repeated key returns the stored result without doing the work again;
- ``.calls.log``: one JSON line per executed mutating call (tool, arguments,
  key), so tests can count executions;
- ``.server.pid``: the pid of the running server, so tests can kill it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

# The key activities.mcp.pool sends (kept literal: this server needs no worker code).
IDEMPOTENCY_META_KEY = "hitlflow/idempotency_key"
NOTE_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: A note ``name`` is the file ``<name>.note``: the server can create, change or delete
#: no other file in its directory (not ``authorized_keys``, a cron entry, a program).
NOTE_SUFFIX = ".note"
KEYS_FILE = ".idempotency.json"
CALLS_LOG = ".calls.log"
PID_FILE = ".server.pid"

READ_ONLY = ToolAnnotations(read_only_hint=True)
REVERSIBLE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
AT_MOST_ONCE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
IRREVERSIBLE = ToolAnnotations(read_only_hint=False, destructive_hint=True)


class NotesStore:
    """The notes directory, with the idempotency record of its mutating calls."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # Requests are served concurrently: check-execute-record must not interleave.
        self.lock = anyio.Lock()

    def path(self, name: str) -> Path:
        if not isinstance(name, str) or not NOTE_NAME_RE.fullmatch(name):
            raise ToolError(
                f"invalid note name {name!r}: use 1-64 characters from A-Z, a-z, 0-9, '_' and '-'"
            )
        return self.root / (name + NOTE_SUFFIX)

    def names(self) -> list[str]:
        files = (p for p in self.root.iterdir() if p.is_file() and p.suffix == NOTE_SUFFIX)
        return sorted(p.stem for p in files if NOTE_NAME_RE.fullmatch(p.stem))

    def _keys(self) -> dict[str, Any]:
        try:
            return json.loads((self.root / KEYS_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def _remember(self, key: str, entry: dict[str, Any]) -> None:
        keys = self._keys()
        keys[key] = entry
        tmp = self.root / f"{KEYS_FILE}.tmp"
        tmp.write_text(json.dumps(keys, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.root / KEYS_FILE)

    async def mutate(
        self, tool: str, arguments: dict[str, Any], ctx: Context, work: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """Run ``work()`` once per idempotency key; a repeated key gets the first result."""
        meta = ctx.request_context.meta or {}
        key = meta.get(IDEMPOTENCY_META_KEY)
        async with self.lock:
            if key is not None:
                done = self._keys().get(key)
                if done is not None:
                    if done["tool"] != tool or done["arguments"] != arguments:
                        raise ToolError(
                            f"idempotency key {key!r} was already used for a different call "
                            f"({done['tool']} {json.dumps(done['arguments'], sort_keys=True)})"
                        )
                    return done["result"]
            result = work()
            if key is not None:
                self._remember(key, {"tool": tool, "arguments": arguments, "result": result})
            line = json.dumps({"tool": tool, "arguments": arguments, "key": key}, sort_keys=True)
            with (self.root / CALLS_LOG).open("a", encoding="utf-8") as log:
                log.write(line + "\n")
            return result


def build_server(root: Path) -> MCPServer:
    store = NotesStore(root)
    mcp: MCPServer = MCPServer("hitlflow-demo-notes", log_level="WARNING")

    @mcp.tool(annotations=READ_ONLY)
    def list_notes() -> list[str]:
        """List the names of all notes."""
        return store.names()

    @mcp.tool(annotations=READ_ONLY)
    def read_note(name: str) -> str:
        """Read one note."""
        path = store.path(name)
        if not path.is_file():
            raise ToolError(f"no such note: {name!r}")
        return path.read_text(encoding="utf-8")

    @mcp.tool(annotations=REVERSIBLE)
    async def write_note(name: str, content: str, ctx: Context) -> dict[str, Any]:
        """Create or overwrite a note (writing the same content again changes nothing)."""
        path = store.path(name)

        def work() -> dict[str, Any]:
            path.write_text(content, encoding="utf-8")
            return {"name": name, "size": len(content)}

        return await store.mutate("write_note", {"name": name, "content": content}, ctx, work)

    @mcp.tool(annotations=AT_MOST_ONCE)
    async def append_note(name: str, text: str, ctx: Context) -> dict[str, Any]:
        """Append text to a note, creating it if needed (twice means appended twice)."""
        path = store.path(name)

        def work() -> dict[str, Any]:
            with path.open("a", encoding="utf-8") as f:
                f.write(text)
            return {"name": name, "size": path.stat().st_size}

        return await store.mutate("append_note", {"name": name, "text": text}, ctx, work)

    @mcp.tool(annotations=IRREVERSIBLE)
    async def delete_note(name: str, ctx: Context) -> dict[str, Any]:
        """Delete a note for good."""
        path = store.path(name)

        def work() -> dict[str, Any]:
            if not path.is_file():
                raise ToolError(f"no such note: {name!r}")
            path.unlink()
            return {"name": name, "deleted": True}

        return await store.mutate("delete_note", {"name": name}, ctx, work)

    return mcp


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="the notes directory")
    args = parser.parse_args(argv)
    root: Path = args.dir.resolve()
    root.mkdir(parents=True, exist_ok=True)
    (root / PID_FILE).write_text(str(os.getpid()), encoding="utf-8")
    build_server(root).run("stdio")


if __name__ == "__main__":
    main()
