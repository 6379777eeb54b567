"""Gateway configuration: the immutable per-app config and the environment-backed CLI settings.

What the server configures alike (keys, TLS files, traces, log level, shutdown grace) is defined once
in :class:`service.shared.settings.SharedSettings`, the base of :class:`GatewaySettings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from gateway.cors import parse_cors_origins
from gateway.http_limits import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADER_COUNT,
    DEFAULT_MAX_HEADER_LINE_BYTES,
    HeaderLimits,
)
from service.shared.api_keys import ApiKeys
from service.shared.settings import DEFAULT_SHUTDOWN_GRACE_S, SharedSettings

# 64 MiB: large enough for batched embeddings of long texts, small enough that one request cannot
# exhaust the gateway's memory. The same limit bounds HTTP bodies and gRPC messages both ways.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: Most keys one JSON object of a request body may have (:mod:`gateway.json_body`). Our schemas
#: have a few dozen fields, a JSON Schema's ``properties`` a few hundred; a ``logit_bias`` map may
#: ban thousands of tokens. Past that, an object's keys cost validation time with the GIL held and
#: a log line naming them all (see docs/architecture/design-notes.md#json-bodies-on-or-off-the-event-loop).
DEFAULT_MAX_OBJECT_KEYS = 10_000

ENV_PREFIX = "UR_GATEWAY_"


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """What one app instance was built with (stored on ``app.state.config``).

    Attributes:
        grpc_target: gRPC address of the inference server, e.g. ``"127.0.0.1:50051"``.
        api_key: When set, ``/v1/*`` requests must send ``Authorization: Bearer <api_key>``,
            and the header is forwarded to the server as ``authorization`` metadata.
        max_message_bytes: Largest HTTP request body and gRPC message (sent or received), in bytes.
        shutdown_grace_s: Seconds an SSE stream may go on once shutdown begins; then it ends
            with an error event.
        api_keys: Every key ``/v1/*`` accepts (``api_key`` among them, named ``default``); the
            client's own token is forwarded, so the server can name its key. Empty: no auth.
        auth_public_health: ``/health`` (and ``/metrics``) need no key; ``False`` guards them too.
        embeddings_truncate: ``/v1/embeddings`` truncates an input longer than the model's
            window when the request does not say (``truncate``/``truncation``); ``False`` (the
            default) refuses it with 400 ``context_length_exceeded``, as OpenAI does.
        max_json_object_keys: Most keys one JSON object of a request body may have
            (:mod:`gateway.json_body`); more is a 400 before the body is validated.

    """

    grpc_target: str
    api_key: str | None
    max_message_bytes: int
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S
    api_keys: ApiKeys = field(default_factory=ApiKeys)
    auth_public_health: bool = True
    embeddings_truncate: bool = False
    max_json_object_keys: int = DEFAULT_MAX_OBJECT_KEYS


class GatewaySettings(SharedSettings):
    """Settings of the ``universal-runtime-gateway`` command.

    Every field can be set from an environment variable named ``UR_GATEWAY_<FIELD>`` (for example
    ``UR_GATEWAY_GRPC_TARGET``); command-line flags take precedence over the environment. Those
    both faces have are :class:`SharedSettings`'s; ``tls_*`` are the gateway's HTTPS.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    grpc_target: str = Field(default="127.0.0.1:50051", description="gRPC address of the server.")
    host: str = Field(default="127.0.0.1", description="Interface the HTTP server binds to.")
    port: int = Field(default=8000, ge=0, le=65535, description="HTTP port; 0 picks a free one.")
    cors_origins: str = Field(
        default="", description="Comma-separated origins allowed cross-origin calls (empty: CORS off)."
    )
    max_message_bytes: int = Field(
        default=DEFAULT_MAX_MESSAGE_BYTES, gt=0, description="Largest HTTP body / gRPC message, bytes."
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Gateway processes sharing the port (the gateway holds no state). Each is a whole "
        "gateway on its own channel; they add throughput only where cores are left over beside the gRPC "
        "server and its models (on 2 cores the model already uses both).",
    )
    routing: Literal["round-robin", "model-affinity"] = Field(
        default="round-robin",
        description="round-robin: each call to the next server; model-affinity: to one holding the model.",
    )
    embeddings_truncate: bool = Field(
        default=False,
        description="`/v1/embeddings` truncates over-long inputs the request does not say about; false: 400 "
        "`context_length_exceeded`.",
    )
    # Bounds of a request's head (gateway.http_limits: 431 above them) and of a JSON body's objects.
    max_header_line_bytes: int = Field(
        default=DEFAULT_MAX_HEADER_LINE_BYTES,
        gt=0,
        description="Largest header line (name and value) or request target, bytes: 431 (414 for the target) "
        "above it. nginx's `large_client_header_buffers 4 8k`.",
    )
    max_header_bytes: int = Field(
        default=DEFAULT_MAX_HEADER_BYTES,
        gt=0,
        description="Largest request head (request line and every header), bytes: 431 above it, refused "
        "as it arrives (Envoy's `max_request_headers_kb` is 60).",
    )
    max_header_count: int = Field(
        default=DEFAULT_MAX_HEADER_COUNT,
        gt=0,
        description="Most headers a request may have: 431 above it (Envoy's `max_headers_count`).",
    )
    max_json_object_keys: int = Field(
        default=DEFAULT_MAX_OBJECT_KEYS,
        gt=0,
        description="Most keys of one JSON object in a request body: 400 `invalid_json` above it, before the "
        "body is validated.",
    )

    def header_limits(self) -> HeaderLimits:
        """The request-head bounds of these settings."""
        return HeaderLimits(self.max_header_line_bytes, self.max_header_bytes, self.max_header_count)

    @field_validator("cors_origins")
    @classmethod
    def _valid_cors_origins(cls, value: str) -> str:
        parse_cors_origins(value)
        return value

    # TLS of the channel to the server (the gateway's own HTTPS is SharedSettings' tls_*).
    grpc_tls_ca_file: Path | None = Field(
        default=None, description="PEM CA bundle that verifies the gRPC server; turns TLS on for the channel."
    )
    grpc_tls_cert_file: Path | None = Field(
        default=None, description="PEM client certificate for a server that requires one (mutual TLS)."
    )
    grpc_tls_key_file: Path | None = Field(default=None, description="PEM private key of grpc_tls_cert_file.")
