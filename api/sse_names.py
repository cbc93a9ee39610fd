"""The SSE event names the service sends and the command line reads (one place, so
the two agree; a module of its own, so the command line loads nothing of the server)."""

#: The last event of a stream whose session ended and whose every event was sent. Its
#: ``id`` repeats the last event's (or the resume point's; 0 for none), so resuming
#: after it is a 204; its data: ``{"last_id": <that id>}``.
STREAM_COMPLETE = "stream.complete"

#: The ephemeral event of the model's text as it is written (no ``id``; not in the log).
TEXT_DELTA = "text.delta"
