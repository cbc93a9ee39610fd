"""Connecting to Temporal: the one place that builds ``Client.connect``'s arguments,
for every process (``worker``, ``api``, ``exporter``, ``log export``, ``up``'s parts;
``api.runtime.process`` and the HTTP service's lifespan both use it).

Secured clusters (TLS, mTLS client certificates, Temporal Cloud's API keys) are
configured the way the ``temporal`` CLI is: temporalio's environment configuration
(docs/operations.md, "Connecting to a secured Temporal").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client

    from api.settings import HitlflowSettings


class TemporalConnectError(RuntimeError):
    """Temporal's client configuration cannot be used, or Temporal cannot be reached or
    refused the connection; the message says which and why, for a person."""


def connect_args(settings: HitlflowSettings) -> dict[str, Any]:
    """``Client.connect``'s arguments for the settings' Temporal (all but the data
    converter): the one place they are built.

    TLS, client certificates, an API key and gRPC metadata come from temporalio's
    environment configuration (``temporalio.envconfig``), as for the ``temporal`` CLI:
    the ``TEMPORAL_*`` variables (``TEMPORAL_TLS_CLIENT_CERT_PATH``, ``TEMPORAL_API_KEY``,
    ...) over the active profile of the configuration file (``TEMPORAL_CONFIG_FILE``,
    ``TEMPORAL_PROFILE``). Its address and namespace are used too, unless hitlflow's are
    given (``HITLFLOW_TEMPORAL_ADDRESS``/``--temporal-address``, ``HITLFLOW_NAMESPACE``/
    ``--namespace``), which win. ``settings.temporal_envconfig`` false skips it all (``up``
    for the dev server it starts, which takes neither TLS nor keys). Raises
    :class:`TemporalConnectError` when the configuration cannot be read (a missing
    certificate file, an unknown profile, a broken file).
    """
    args: dict[str, Any] = {}
    if settings.temporal_envconfig:
        from temporalio.envconfig import ClientConfigProfile

        try:
            args = dict(ClientConfigProfile.load().to_client_connect_config())
        except Exception as err:  # the bridge's ConfigError, OSError for a certificate file
            raise TemporalConnectError(
                "Temporal's client configuration (the TEMPORAL_* variables and the profile "
                f"file) cannot be used: {err}") from None
    if settings.temporal_address or not args.get("target_host"):
        args["target_host"] = settings.target
    if "namespace" in settings.model_fields_set or not args.get("namespace"):
        args["namespace"] = settings.namespace
    return args


def describe_connection(args: dict[str, Any]) -> str:
    """Where and how :func:`connect_args` connects, for a person (never a secret)."""
    how = []
    tls = args.get("tls")
    if tls:
        how.append("TLS")
        if getattr(tls, "client_cert", None):
            how.append("client certificate")
    if args.get("api_key"):
        how.append("API key")
    return (f"{args['target_host']}, namespace {args['namespace']}"
            + (f" ({', '.join(how)})" if how else ""))


def _refusal_hint(args: dict[str, Any], error: str) -> str:
    """Why a connection failed, in words, when the SDK's error shows it."""
    text = error.lower()
    tls = args.get("tls")
    client_cert = bool(getattr(tls, "client_cert", None))
    set_cert = ("set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH "
                "(or a profile's client_cert_path and client_key_path)")
    if any(s in text for s in ("certificate required", "certificaterequired",
                               "no required ssl certificate")):
        return f"the server requires a client certificate: {set_cert}"
    if tls and not client_cert and "400 bad request" in text:
        # How a TLS-terminating proxy (nginx's ssl_verify_client) refuses a client that
        # sent no certificate: an HTTP 400 page where gRPC was expected.
        return ("the server refused the request (HTTP 400 where gRPC was expected) and no "
                "client certificate is configured: it requires a client certificate, "
                f"most likely: {set_cert}")
    if any(s in text for s in ("certificate", "handshake", "tls", "ssl", "alert")):
        return ("the TLS handshake failed: check TEMPORAL_TLS_SERVER_CA_CERT_PATH, "
                "TEMPORAL_TLS_SERVER_NAME and the client certificate")
    if not tls and any(s in text for s in ("connection reset", "broken pipe", "eof")):
        return "the server may expect TLS: set TEMPORAL_TLS=true (and its certificates)"
    return ""


async def connect(settings: HitlflowSettings, **kwargs: Any) -> Client:
    """A Temporal client for the settings (:func:`connect_args`; pydantic payloads);
    ``kwargs`` go to ``Client.connect`` (``lazy=True``: the API). Raises
    :class:`TemporalConnectError`, saying why, when it cannot connect."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    args = connect_args(settings)
    try:
        return await Client.connect(**args, data_converter=pydantic_data_converter, **kwargs)
    except RuntimeError as err:  # the SDK's "Failed client connect: ..."
        hint = _refusal_hint(args, str(err))
        raise TemporalConnectError(
            f"cannot connect to Temporal at {describe_connection(args)}: "
            f"{hint + '; ' if hint else ''}{err}") from None
