"""An MCP server whose tools never return: stand-ins for a tool call that is under
way when the worker running it dies, or when the session is cancelled. Before it
hangs each tool appends a line to ``<dir>/<tool>es.log`` (``launches.log``,
``watches.log``), so a test can tell it runs and count how often it really ran.

    python -m tests.fakes.hanging_mcp_server --dir DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

AT_MOST_ONCE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
READ_ONLY = ToolAnnotations(read_only_hint=True)


def build_server(root: Path) -> MCPServer:
    mcp: MCPServer = MCPServer("hitlflow-test-hanging", log_level="WARNING")

    @mcp.tool(annotations=AT_MOST_ONCE)
    async def launch(name: str) -> str:
        """Launch something (not idempotent) and never report back."""
        with (root / "launches.log").open("a") as f:
            f.write(name + "\n")
        await anyio.sleep_forever()
        return "unreachable"

    @mcp.tool(annotations=READ_ONLY)
    async def watch(name: str) -> str:
        """Watch something (read-only, retried freely) and never report back."""
        with (root / "watches.log").open("a") as f:
            f.write(name + "\n")
        await anyio.sleep_forever()
        return "unreachable"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path)
    args = parser.parse_args()
    build_server(args.dir).run(transport="stdio")


if __name__ == "__main__":
    main()
