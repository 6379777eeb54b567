"""The gateway's single gRPC channel to the inference server and the stubs built on it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2_grpc
from universal_runtime.v1 import (
    batch_pb2_grpc,
    inference_service_pb2_grpc,
    model_service_pb2_grpc,
    response_store_pb2_grpc,
)

SERVICE_CONFIG = {
    # Several servers (``ipv4:10.0.0.1:50051,10.0.0.2:50051``, or ``dns:///`` of a headless
    # Service): every call goes to the next ready one, and a replica that dies drops out.
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [
        {
            "name": [
                {"service": "universal_runtime.v1.InferenceService"},
                {"service": "universal_runtime.v1.ModelService"},
                {"service": "grpc.health.v1.Health"},
            ],
            # gRPC resends a call only while it is uncommitted (no answer headers yet): a unary
            # call whose replica died before answering, or that a draining replica refused.
            # Streams send their headers at once, so a stream cut mid-way ends with UNAVAILABLE.
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.05s",
                "maxBackoff": "0.5s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ],
}
"""The gateway's gRPC service config (gRPC's own JSON format: ``doc/service_config.md`` in
grpc/grpc): round-robin balancing over the target's addresses and a retry policy for UNAVAILABLE.
docs/scale-out/client-balancing.md gives the same to Python and Node callers."""


ChannelWrapper = Callable[[grpc.aio.Channel], grpc.aio.Channel]
"""Takes the gateway's channel and returns the channel its stubs are built on."""


@dataclass(frozen=True, slots=True)
class GrpcClients:
    """One ``grpc.aio`` channel and the stubs of every service the gateway calls.

    One channel serves all requests: gRPC multiplexes concurrent calls over its HTTP/2
    connection, so a channel per request would only add connection setup.

    Attributes:
        channel: The channel; closed by :meth:`close`.
        inference: ``universal_runtime.v1.InferenceService`` stub.
        models: ``universal_runtime.v1.ModelService`` stub.
        responses: ``universal_runtime.v1.ResponseStoreService`` stub (the Responses API's stored
            responses: ``PutStoredResponse``, ``GetStoredResponse``, ``DeleteStoredResponse``).
        health: ``grpc.health.v1.Health`` stub.
        batches: ``universal_runtime.v1.BatchService`` stub (the Batch API's files and batches).

    """

    channel: grpc.aio.Channel
    inference: inference_service_pb2_grpc.InferenceServiceStub
    models: model_service_pb2_grpc.ModelServiceStub
    responses: response_store_pb2_grpc.ResponseStoreServiceStub
    health: health_pb2_grpc.HealthStub
    batches: batch_pb2_grpc.BatchServiceStub

    @classmethod
    def open(
        cls,
        target: str,
        *,
        max_message_bytes: int,
        credentials: grpc.ChannelCredentials | None = None,
        wrap_channel: ChannelWrapper | None = None,
    ) -> GrpcClients:
        """Open a channel to ``target`` (``host:port``) and build the stubs: TLS with ``credentials``.

        Must run inside the event loop that will use the channel. The channel connects lazily, so
        this succeeds even when the server is down; calls then fail with UNAVAILABLE.

        Args:
            target: gRPC target: ``"127.0.0.1:50051"``, several servers
                (``"ipv4:127.0.0.1:50051,127.0.0.1:50052"``) or a DNS name of several
                (``"dns:///universal-runtime-grpc:50051"``), balanced by :data:`SERVICE_CONFIG`.
            max_message_bytes: Limit on sent and received message sizes; larger messages fail
                with RESOURCE_EXHAUSTED before (send) or instead of (receive) reaching the peer.
            credentials: TLS credentials (:func:`service.shared.tls.channel_credentials`); ``None`` for
                plaintext. A TLS handshake that fails (unknown CA, client certificate refused)
                makes calls fail with UNAVAILABLE.
            wrap_channel: Turns the channel into the one the stubs use: the server in the same
                process answers its calls (unary and streaming) without the loopback hop this way
                (``service.faces.in_process``); ``None`` for the channel itself.

        """
        channel = open_channel(target, max_message_bytes=max_message_bytes, credentials=credentials)
        if wrap_channel is not None:
            channel = wrap_channel(channel)
        return cls.on(channel)

    @classmethod
    def on(cls, channel: grpc.aio.Channel) -> GrpcClients:
        """The stubs of every service, built on ``channel`` (which :meth:`close` closes)."""
        return cls(
            channel=channel,
            inference=inference_service_pb2_grpc.InferenceServiceStub(channel),
            models=model_service_pb2_grpc.ModelServiceStub(channel),
            responses=response_store_pb2_grpc.ResponseStoreServiceStub(channel),
            health=health_pb2_grpc.HealthStub(channel),
            batches=batch_pb2_grpc.BatchServiceStub(channel),
        )

    async def close(self) -> None:
        """Close the channel, cancelling calls still in flight."""
        await self.channel.close(grace=None)


def open_channel(
    target: str, *, max_message_bytes: int, credentials: grpc.ChannelCredentials | None = None
) -> grpc.aio.Channel:
    """A ``grpc.aio`` channel to ``target`` with the gateway's options (see :meth:`GrpcClients.open`).

    Message limits of ``max_message_bytes`` both ways, :data:`SERVICE_CONFIG`'s balancing and
    retries, keepalive pings; TLS with ``credentials``. Must run inside the event loop that will
    use it; it connects lazily.
    """
    options = [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.service_config", json.dumps(SERVICE_CONFIG)),
        ("grpc.enable_retries", 1),
        # A replica that comes back is tried again within 5 s, not after gRPC's default
        # backoff (up to 120 s), so a restarted pod takes its share of calls at once.
        ("grpc.max_reconnect_backoff_ms", 5_000),
        # While calls are open, ping every 30 s and drop a connection whose replica does not
        # answer within 10 s (a lost node sends no reset): its calls fail UNAVAILABLE instead
        # of waiting for their deadlines. The server allows pings this often.
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
    ]
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(target, credentials, options=options)
