"""Reaching people (issue 26): the notifier, its channels and signed action links.

The notifier is a projection of the log: the read model records each notice (a
request opened, reminded, escalated, expired or auto-decided; a session's end) in
the same transaction as the rows it derives from the line; the notifier routes new
notices into a durable outbox (one message per channel and recipient, each with a
stable id) and delivers it at least once, with backoff, for a window; what is not
delivered in time is a dead letter. See docs/notifications.md.
"""
