"""Model-affinity routing (``UR_GATEWAY_ROUTING=model-affinity``).

A request goes to a replica that already holds its model, so N replicas serving many models do
not all load every model.

Round robin (the default, :data:`gateway.grpc_clients.SERVICE_CONFIG`) spreads each model's
requests over every replica, and each replica loads every model it is asked for. With affinity,
the gateway keeps one channel per replica beside the balanced one, asks every replica for its
loaded models (``ListModels``) every ``refresh_s``, and sends a request naming a model to one of
the replicas reporting it READY (round robin among them). A model no replica holds goes to the
replica its name hashes to (rendezvous hashing), so its first requests load it once; before any
replica has answered, requests go through the balanced channel.

Bounded: one ``ListModels`` per replica per look, each with a one-second deadline; a replica
that does not answer is left out until it does. Replicas come from the gateway's target:
``ipv4:a:50051,b:50051`` or ``dns:///name:50051`` (resolved again at each look, so a headless
Service's pods come and go); a single address has nothing to choose from.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import socket

import grpc
from universal_runtime.v1 import model_service_pb2

from gateway.grpc_clients import GrpcClients

logger = logging.getLogger(__name__)

ROUTING_MODES = ("round-robin", "model-affinity")
LIST_MODELS_DEADLINE_S = 1.0


def replica_addresses(target: str) -> list[str]:
    """The ``host:port`` of each replica named by a gRPC target (blocking for ``dns:///``).

    ``ipv4:a:1,b:2`` gives both; ``dns:///name:port`` every address the name resolves to; any
    other target is one replica.

    Raises:
        OSError: a ``dns:///`` name that does not resolve.

    """
    if target.startswith("ipv4:"):
        return [address for address in target.removeprefix("ipv4:").split(",") if address]
    if target.startswith("dns:"):
        name = target.removeprefix("dns:").lstrip("/")
        host, _, port = name.rpartition(":")
        found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        ips = {info[4][0] for info in found}
        return sorted(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip in ips)
    return [target]


def _weight(model: str, address: str) -> int:
    """Rendezvous-hashing weight of ``address`` for ``model`` (stable across processes)."""
    return int.from_bytes(hashlib.blake2b(f"{model}@{address}".encode(), digest_size=8).digest(), "big")


class ModelAffinityRouter:
    """Channels to each replica and what each has loaded; picks one for a model.

    Args:
        target: the gateway's gRPC target (see :func:`replica_addresses`).
        max_message_bytes: as the balanced channel's.
        credentials: TLS credentials of the channels, or None.
        refresh_s: seconds between looks at the replicas' loaded models.

    """

    def __init__(
        self,
        target: str,
        *,
        max_message_bytes: int,
        credentials: grpc.ChannelCredentials | None = None,
        refresh_s: float = 2.0,
    ) -> None:
        self._target = target
        self._max_message_bytes = max_message_bytes
        self._credentials = credentials
        self._refresh_s = refresh_s
        self._replicas: dict[str, GrpcClients] = {}
        self._loaded: dict[str, frozenset[str]] = {}
        self._turn = itertools.count()
        self._task: asyncio.Task[None] | None = None

    def pick(self, model: str) -> GrpcClients | None:
        """The channel for a request naming ``model``, or None (no replica answered yet).

        A replica holding ``model`` (round robin among them); if none does, the replica the
        model's name hashes to (rendezvous hashing over the replicas that answered), so that
        simultaneous first requests for a model all load it on one replica, and the choice moves
        for few models when replicas come and go.
        """
        holders = [address for address, names in self._loaded.items() if model in names]
        if holders:
            return self._replicas[holders[next(self._turn) % len(holders)]]
        if not self._loaded:
            return None
        home = max(self._loaded, key=lambda address: _weight(model, address))
        return self._replicas[home]

    def loaded(self) -> dict[str, frozenset[str]]:
        """What each replica reported at the last look, by address (for tests and logs)."""
        return dict(self._loaded)

    async def refresh(self) -> None:
        """Look once: resolve the replicas, open or close their channels, ask each for its models."""
        try:
            addresses = await asyncio.to_thread(replica_addresses, self._target)
        except OSError as exc:
            logger.warning("cannot resolve %s: %s", self._target, exc)
            return
        for address in set(self._replicas) - set(addresses):
            await self._replicas.pop(address).close()
            self._loaded.pop(address, None)
        for address in addresses:
            if address not in self._replicas:
                self._replicas[address] = GrpcClients.open(
                    address, max_message_bytes=self._max_message_bytes, credentials=self._credentials
                )
        answers = await asyncio.gather(*(self._models_of(address) for address in addresses))
        for address, names in zip(addresses, answers, strict=True):
            if names is None:
                self._loaded.pop(address, None)
            else:
                self._loaded[address] = names

    async def _models_of(self, address: str) -> frozenset[str] | None:
        try:
            response = await self._replicas[address].models.ListModels(
                model_service_pb2.ListModelsRequest(), timeout=LIST_MODELS_DEADLINE_S
            )
        except grpc.aio.AioRpcError:
            return None
        ready = model_service_pb2.MODEL_STATUS_READY
        return frozenset(model.name for model in response.models if model.status == ready)

    def start(self) -> None:
        """Look now and every ``refresh_s`` from a background task (call from the running loop)."""
        self._task = asyncio.create_task(self._refresh_forever(), name="model-affinity-router")

    async def _refresh_forever(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # a look that fails leaves the last view; the next one tries again
                logger.exception("model-affinity refresh failed")
            await asyncio.sleep(self._refresh_s)

    async def close(self) -> None:
        """Stop looking and close every replica's channel."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for clients in self._replicas.values():
            await clients.close()
        self._replicas.clear()
        self._loaded.clear()
