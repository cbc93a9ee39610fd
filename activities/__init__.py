"""Everything with side effects that a workflow asks for: LLM, MCP tools, commands."""
