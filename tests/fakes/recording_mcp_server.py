"""An MCP server that records every tool call it receives, and can be told to hang
or die at the two points that matter for "outcome unknown":

- ``<dir>/hang-start`` present when it starts: it removes the file and hangs before
  the MCP handshake (a worker lost while starting the server: nothing was sent);
- ``<dir>/hang-call`` present when ``delete`` is called: it records the call,
  removes the file and never answers (a worker lost mid-call: it may have run);
- ``<dir>/crash-call``: it records the call, removes the file and exits (the
  connection is lost after the request arrived: it may have run);
- ``<dir>/fail-start`` present when it starts: it exits at once (a server that
  cannot start; the file stays);
- ``<dir>/slow-call`` holds a number of seconds ``delete`` takes before answering;
- ``<dir>/hold-call`` present when ``delete`` or ``put`` is called: it records the
  call, then answers only once ``<dir>/release`` exists (a call under way for as long
  as a test needs it to be).

Every ``delete`` (and reversible ``put``) call it receives is one JSON line in
``<dir>/calls.log`` (name and idempotency key), written before anything else
happens; ``<dir>/start-hung`` appears once it hangs at start, ``<dir>/server.pid``
holds the pid of the one serving.

    python -m tests.fakes.recording_mcp_server --dir DIR
"""

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

IDEMPOTENCY_META_KEY = "hitlflow/idempotency_key"


def _take(flag: Path) -> bool:
    try:
        flag.unlink()
    except FileNotFoundError:
        return False
    return True


def build_server(root: Path) -> "MCPServer":
    # Imported here, not at the top: a server told to fail or hang at start does so
    # without a second of imports (tests wait for every such start). No `from
    # __future__ import annotations` in this file: the tools' annotations name these.
    import anyio
    from mcp.server.mcpserver import Context, MCPServer
    from mcp_types import ToolAnnotations

    irreversible = ToolAnnotations(read_only_hint=False, destructive_hint=True)
    reversible = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                 idempotent_hint=True)
    mcp: MCPServer = MCPServer("hitlflow-test-recording", log_level="WARNING")

    async def _held(root: Path) -> None:
        if (root / "hold-call").exists():
            while not (root / "release").exists():
                await anyio.sleep(0.02)

    @mcp.tool(annotations=irreversible)
    async def delete(name: str, ctx: Context) -> str:
        """Delete something (irreversible)."""
        key = (ctx.request_context.meta or {}).get(IDEMPOTENCY_META_KEY)
        with (root / "calls.log").open("a") as f:
            f.write(json.dumps({"name": name, "key": key}) + "\n")
        if _take(root / "crash-call"):
            os._exit(1)
        slow = root / "slow-call"
        if slow.exists():
            await anyio.sleep(float(slow.read_text()))
        if _take(root / "hang-call"):
            await anyio.sleep_forever()
        await _held(root)
        return f"deleted {name}"

    @mcp.tool(annotations=reversible)
    async def put(name: str, ctx: Context) -> str:
        """Put something (reversible): recorded like ``delete``, with ``"tool": "put"``."""
        key = (ctx.request_context.meta or {}).get(IDEMPOTENCY_META_KEY)
        with (root / "calls.log").open("a") as f:
            f.write(json.dumps({"name": name, "key": key, "tool": "put"}) + "\n")
        await _held(root)
        return f"put {name}"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path)
    args = parser.parse_args()
    if (args.dir / "fail-start").exists():
        sys.exit("told to fail at start")
    if _take(args.dir / "hang-start"):
        (args.dir / "start-hung").touch()
        sys.stdin.buffer.read()  # until the client goes away (end of file)
        return
    (args.dir / "server.pid").write_text(str(os.getpid()))
    build_server(args.dir).run(transport="stdio")


if __name__ == "__main__":
    main()
