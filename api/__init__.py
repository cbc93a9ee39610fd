"""The ways in: the HTTP/SSE service and the command line."""
