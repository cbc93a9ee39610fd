"""Connecting to a secured Temporal (issue 25, item 3; docs/operations.md, "Connecting to
a secured Temporal").

The real thing: Debian's nginx, the test's own child on 127.0.0.1, terminates TLS and
verifies client certificates (``ssl_verify_client on``) in front of the dev server,
passing gRPC on (``grpc_pass``); the certificates (a CA, a server certificate for
127.0.0.1, a client certificate) are made here with ``cryptography``. ``hitlflow
worker`` (a subprocess) connects through it with the ``TEMPORAL_TLS_*`` variables of
temporalio's environment configuration and polls; without its certificate it is refused
and says why. Then the precedence rules of ``api.temporal_connection.connect_args``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import os
import shutil
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.service import TLSConfig
from temporalio.testing import WorkflowEnvironment

from api.settings import HitlflowSettings
from api.temporal_connection import TemporalConnectError, connect_args, describe_connection

ROOT = Path(__file__).resolve().parents[3]
#: Bounds for a process to reach a state (a failure, not a timing assertion).
WITHIN_S = 60.0

# ---------------------------------------------------------------------------
# Certificates


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
          server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder()
               .subject_name(name)
               .issuer_name(issuer.subject if issuer else name)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certs(folder: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    def write(name: str, data: bytes) -> Path:
        path = folder / name
        path.write_bytes(data)
        return path

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key, server_key, client_key = _key(), _key(), _key()
    ca = _cert("hitlflow test CA", ca_key, None, ca_key, ca=True)
    server = _cert("127.0.0.1", server_key, ca, ca_key, server=True)
    client = _cert("hitlflow-worker", client_key, ca, ca_key)
    pem = serialization.Encoding.PEM
    return Certs(ca=write("ca.pem", ca.public_bytes(pem)),
                 server_cert=write("server.pem", server.public_bytes(pem)),
                 server_key=write("server.key", key_pem(server_key)),
                 client_cert=write("client.pem", client.public_bytes(pem)),
                 client_key=write("client.key", key_pem(client_key)))


# ---------------------------------------------------------------------------
# nginx: TLS, client certificates verified, gRPC passed to the dev server


def _nginx() -> str:
    """Debian's nginx; missing, the test fails in CI (``CI`` set) and is skipped
    elsewhere, saying how to get it."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if not found:
        why = ("the mTLS proxy test needs Debian's nginx (apt-get install nginx; the README's "
               "test command installs it)")
        if os.environ.get("CI"):
            pytest.fail(f"no nginx found: {why}")
        pytest.skip(f"no nginx found: {why}")
    return found


NGINX_CONF = """\
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 64; }}
http {{
    log_format mtls '$remote_addr "$request" $status client="$ssl_client_s_dn"';
    access_log {dir}/access.log mtls;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {certs.server_cert};
        ssl_certificate_key {certs.server_key};
        ssl_client_certificate {certs.ca};
        ssl_verify_client on;
        location / {{
            grpc_pass grpc://{upstream};
            grpc_read_timeout 300s;
            grpc_send_timeout 300s;
        }}
    }}
}}
"""


@dataclass(frozen=True)
class Proxy:
    address: str
    certs: Certs
    folder: Path
    upstream: str

    def access_log(self) -> str:
        return (self.folder / "access.log").read_text(errors="replace")


async def _until(check: Callable[[], bool], proc: asyncio.subprocess.Process, what: str,
                 describe: Callable[[], str]) -> None:
    """Wait for ``check()`` while ``proc`` runs; the bound only turns a hang into a failure."""
    deadline = asyncio.get_running_loop().time() + WITHIN_S
    while not check():
        if proc.returncode is not None:
            pytest.fail(f"{what}: the process exited with {proc.returncode}: {describe()}")
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"{what}: not within {WITHIN_S:.0f} s: {describe()}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 0.05)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
async def proxy(dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory,
                free_port: Callable[[], int]) -> AsyncIterator[Proxy]:
    nginx = _nginx()
    folder = tmp_path_factory.mktemp("nginx")
    certs = make_certs(folder)
    port = free_port()
    upstream = dev_env.client.service_client.config.target_host
    conf = folder / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=folder, port=port, certs=certs, upstream=upstream))
    proc = await asyncio.create_subprocess_exec(
        nginx, "-p", str(folder), "-c", str(conf), "-e", str(folder / "error.log"),
        "-g", "daemon off;", stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        await _until(lambda: _listening(port), proc, "nginx listening",
                     lambda: (folder / "error.log").read_text(errors="replace")[-2000:])
        yield Proxy(f"127.0.0.1:{port}", certs, folder, upstream)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), WITHIN_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()


# ---------------------------------------------------------------------------
# hitlflow worker through the proxy


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any Temporal client configuration (and with
    no profile file), plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TEMPORAL_", "HITLFLOW_"))}
    return {**env, "TEMPORAL_CONFIG_FILE": os.devnull, "PYTHONUNBUFFERED": "1", **extra}


async def _start_worker(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "api.cli", "worker", cwd=ROOT, env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)


async def _pollers(dev_env: WorkflowEnvironment, task_queue: str) -> list[str]:
    resp = await dev_env.client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace="default", task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    return [p.identity for p in resp.pollers]


async def test_hitlflow_worker_connects_through_the_mtls_proxy_with_its_certificate(
        proxy: Proxy, dev_env: WorkflowEnvironment) -> None:
    task_queue = f"tls-{uuid.uuid4().hex[:8]}"
    env = _clean_env(HITLFLOW_TEMPORAL_ADDRESS=proxy.address, HITLFLOW_TASK_QUEUE=task_queue,
                     TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(proxy.certs.ca),
                     TEMPORAL_TLS_CLIENT_CERT_PATH=str(proxy.certs.client_cert),
                     TEMPORAL_TLS_CLIENT_KEY_PATH=str(proxy.certs.client_key))
    worker = await _start_worker(env)
    try:
        assert worker.stdout is not None
        said = (await asyncio.wait_for(worker.stdout.readline(), WITHIN_S)).decode()
        assert (f"Temporal {proxy.address}, namespace default (TLS, client certificate)"
                in said), said
        polling: list[str] = []

        async def poll() -> None:
            polling[:] = await _pollers(dev_env, task_queue)

        deadline = asyncio.get_running_loop().time() + WITHIN_S
        while not polling:  # the dev server sees the worker poll, through the proxy
            await poll()
            if worker.returncode is not None or asyncio.get_running_loop().time() > deadline:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.wait(), 0.1)
        assert polling, f"the worker never polled {task_queue} (exit {worker.returncode})"
        assert 'client="CN=hitlflow-worker"' in proxy.access_log()
        worker.send_signal(signal.SIGINT)
        _out, err = await asyncio.wait_for(worker.communicate(), WITHIN_S)
        assert worker.returncode == 0, err.decode()
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()


async def test_without_its_certificate_hitlflow_worker_is_refused_and_says_why(
        proxy: Proxy) -> None:
    env = _clean_env(HITLFLOW_TEMPORAL_ADDRESS=proxy.address,
                     HITLFLOW_TASK_QUEUE=f"tls-{uuid.uuid4().hex[:8]}",
                     TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(proxy.certs.ca))
    worker = await _start_worker(env)
    try:
        _out, err = await asyncio.wait_for(worker.communicate(), WITHIN_S)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    text = err.decode()
    assert worker.returncode == 1, text
    assert "Traceback" not in text, text
    assert f"cannot connect to Temporal at {proxy.address}" in text, text
    assert "requires a client certificate" in text, text  # why, in words
    assert "TEMPORAL_TLS_CLIENT_CERT_PATH" in text, text


# ---------------------------------------------------------------------------
# Whose settings win


@pytest.fixture
def temporal_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """No TEMPORAL_*/HITLFLOW_* variable and no profile file, until the test sets them."""
    for name in list(os.environ):
        if name.startswith(("TEMPORAL_", "HITLFLOW_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "absent.toml"))
    yield monkeypatch


def test_without_configuration_it_connects_as_before(temporal_env: pytest.MonkeyPatch) -> None:
    args = connect_args(HitlflowSettings())
    assert args == {"target_host": "127.0.0.1:7233", "namespace": "default"}
    assert describe_connection(args) == "127.0.0.1:7233, namespace default"


def test_the_temporal_variables_apply_and_hitlflows_address_and_namespace_win(
        temporal_env: pytest.MonkeyPatch) -> None:
    temporal_env.setenv("TEMPORAL_ADDRESS", "cloud.example:7233")
    temporal_env.setenv("TEMPORAL_NAMESPACE", "prod.a1b2c")
    temporal_env.setenv("TEMPORAL_API_KEY", "k-secret")
    args = connect_args(HitlflowSettings())
    assert args["target_host"] == "cloud.example:7233"
    assert args["namespace"] == "prod.a1b2c"
    assert args["api_key"] == "k-secret" and args["tls"] is True  # an API key means TLS
    assert "k-secret" not in describe_connection(args)
    assert describe_connection(args).endswith("(TLS, API key)")

    temporal_env.setenv("HITLFLOW_TEMPORAL_ADDRESS", "mine.example:7233")
    temporal_env.setenv("HITLFLOW_NAMESPACE", "hitl")
    args = connect_args(HitlflowSettings())
    assert (args["target_host"], args["namespace"]) == ("mine.example:7233", "hitl")
    assert args["api_key"] == "k-secret"


def test_a_profile_file_works_as_for_the_temporal_cli(temporal_env: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    config = tmp_path / "temporal.toml"
    config.write_text(f"""\
[profile.prod]
address = "temporal.example:7233"
namespace = "prod"
[profile.prod.tls]
client_cert_path = "{certs.client_cert}"
client_key_path = "{certs.client_key}"
server_ca_cert_path = "{certs.ca}"
""")
    temporal_env.setenv("TEMPORAL_CONFIG_FILE", str(config))
    temporal_env.setenv("TEMPORAL_PROFILE", "prod")
    args = connect_args(HitlflowSettings())
    assert (args["target_host"], args["namespace"]) == ("temporal.example:7233", "prod")
    tls = args["tls"]
    assert isinstance(tls, TLSConfig)
    assert tls.client_cert == certs.client_cert.read_bytes()
    assert tls.server_root_ca_cert == certs.ca.read_bytes()


def test_ups_own_dev_server_ignores_the_temporal_configuration(
        temporal_env: pytest.MonkeyPatch) -> None:
    temporal_env.setenv("TEMPORAL_API_KEY", "k-secret")
    temporal_env.setenv("TEMPORAL_TLS", "true")
    args = connect_args(HitlflowSettings(temporal_address="127.0.0.1:7233",
                                         temporal_envconfig=False))
    assert args == {"target_host": "127.0.0.1:7233", "namespace": "default"}


def test_a_configuration_that_cannot_be_used_is_a_clear_error(
        temporal_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    temporal_env.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(tmp_path / "missing.pem"))
    with pytest.raises(TemporalConnectError, match=r"missing\.pem"):
        connect_args(HitlflowSettings())
    temporal_env.delenv("TEMPORAL_TLS_CLIENT_CERT_PATH")
    temporal_env.setenv("TEMPORAL_PROFILE", "nope")
    with pytest.raises(TemporalConnectError, match="nope"):
        connect_args(HitlflowSettings())
