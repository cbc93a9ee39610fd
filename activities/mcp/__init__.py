"""MCP tools: the client pool (``pool``, one live session per server, bounded), each
session's connection (``connection``), MCP answers in the workflow's terms
(``results``) and the tool activities (``tools``). All of it loads the ``mcp`` SDK:
nothing outside the worker imports it."""
