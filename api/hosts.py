"""The Host names this machine answers to: one rule for hitlflow's API
(``api/http/doors.py``) and the Web UI's proxy (``api/runtime/ui_proxy.py``).

A web page can make its own name resolve to 127.0.0.1 (DNS rebinding) and so become
same-origin with a local server in the browser; its requests still name the page's
host, so checking ``Host`` against the names we know shuts it out.
"""

from __future__ import annotations

from api.settings import LOCAL_HOSTS


def host_name(host: str) -> str:
    """The name in a Host header (or an allow-list entry), without its port, lower case:
    ``[::1]:8000`` -> ``::1``, ``Example.org:80`` -> ``example.org``. A header that is
    not a name and an optional port (``localhost:``, ``[::1]x``) comes back whole, so it
    matches no name."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        if rest == "" or (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit()):
            return name
        return host
    name, colon, port = host.rpartition(":")
    if colon and ":" not in name:
        return name if port.isascii() and port.isdigit() else host
    return host


def is_local(host: str | None) -> bool:
    """Whether a Host header names this machine: localhost, 127.0.0.1 or [::1], any
    port or none. No header at all is not."""
    return bool(host) and host_name(host) in LOCAL_HOSTS
