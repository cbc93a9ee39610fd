"""The HTTP service: the app, its routers, the inbox page, the SSE stream."""
