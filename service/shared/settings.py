"""The settings both faces have, defined once, each face reading them under its own prefix.

The server reads them as ``UR_<NAME>``, the standalone gateway as ``UR_GATEWAY_<NAME>``.

:class:`SharedSettings` is the base of :class:`service.settings.Settings` (prefix ``UR_``) and of
:class:`gateway.settings.GatewaySettings` (prefix ``UR_GATEWAY_``); each face adds its own fields
(ports and hosts among them). The operator commands read ``UR_API_KEY`` through the server's
settings too.

Only pydantic here, no grpc: the server's settings reach every layer (its tasks too), which must
not import a transport.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Default seconds between two looks at the certificate files (a ``stat`` of each: cheap).
DEFAULT_REFRESH_INTERVAL_S = 5.0
#: Seconds in-flight RPCs and SSE streams get once shutdown begins, on either face.
DEFAULT_SHUTDOWN_GRACE_S = 10.0


def _lower_case(value: object) -> object:
    # Python's logging spells levels in capitals (INFO), uvicorn in lower case: take either.
    return value.lower() if isinstance(value, str) else value


LogLevel = Annotated[Literal["critical", "error", "warning", "info", "debug"], BeforeValidator(_lower_case)]


class SharedSettings(BaseSettings):
    """What both faces configure alike: API keys, TLS files, traces, log level and shutdown grace.

    Not used alone: subclasses set the environment prefix (``UR_`` for the server, ``UR_GATEWAY_``
    for the standalone gateway). ``api_key`` is a :class:`pydantic.SecretStr` so that it never
    shows in a repr or a log line; read it with ``get_secret_value()``.
    """

    model_config = SettingsConfigDict(extra="ignore")

    api_key: SecretStr | None = Field(
        None,
        description="One API key, named 'default': calls need 'authorization: Bearer <key>' (the gateway "
        "forwards the caller's token to the server).",
    )
    api_keys_file: Path | None = Field(
        None,
        description="YAML/JSON mapping of key name to key, or to key (or its salted hash, key_hash) and "
        "policy (priority, weight, quotas, role: docs/operate/keys-and-quotas.md); calls need one of them "
        "(with api_key, named 'default', role admin). Each call's log line names its key.",
    )
    auth_public_health: bool = Field(
        True,
        description="Health checks need no key (gRPC health and reflection; the gateway's /health, /metrics "
        "and API docs); false guards them too.",
    )
    otlp_endpoint: str | None = Field(
        None, description="OTLP/gRPC collector for traces (http://host:4317); unset = tracing off."
    )
    log_level: LogLevel = Field(
        "info", description="Log level: critical, error, warning, info or debug (any case)."
    )
    shutdown_grace_s: float = Field(
        DEFAULT_SHUTDOWN_GRACE_S,
        ge=0,
        description="Seconds in-flight RPCs and streams get on shutdown; then they end with an error.",
    )
    # TLS (docs/operate/tls.md): checked when the face starts (service.shared.tls.TlsFiles), not here,
    # so that settings built in code (model_copy) are checked too.
    tls_cert_file: Path | None = Field(
        None,
        description="PEM certificate chain of this face (the server's gRPC port, the gateway's HTTPS); "
        "with tls_key_file turns TLS on.",
    )
    tls_key_file: Path | None = Field(None, description="PEM private key (unencrypted) of tls_cert_file.")
    tls_client_ca_file: Path | None = Field(
        None,
        description="PEM CA bundle; when set, clients must present a certificate it signed (mutual TLS).",
    )
    tls_refresh_interval_s: float = Field(
        DEFAULT_REFRESH_INTERVAL_S,
        ge=0,
        description="Seconds between looks at the TLS files for a new certificate (the server's also for "
        "the gateway beside it); 0 never reloads.",
    )

    def api_key_value(self) -> str | None:
        """The single API key as text, or ``None`` when unset."""
        return None if self.api_key is None else self.api_key.get_secret_value()


def describe_settings_error(err: ValidationError, prefix: str) -> str:
    """One line naming each refused setting by its variable and saying what it accepts.

    The values given are left out: one may be a key.

    Args:
        err: What building a settings model raised.
        prefix: The model's environment prefix (``UR_``, ``UR_GATEWAY_``).

    """
    problems = [
        f"{prefix}{'_'.join(str(part) for part in error['loc']).upper()}: {error['msg']}"
        for error in err.errors()
    ]
    return "; ".join(problems)
