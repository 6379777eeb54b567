"""A gRPC server (or in-process face) over fake servicers, through the real core and admission chain.

For tests of admission and the faces in isolation: the servicers are fakes, the chain, data plane
and faces are the server's own (:mod:`service.core`, :mod:`service.faces`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from service.core.admission.error_mapping import ErrorMapping
from service.core.admission.priority import PriorityClass
from service.core.admission.request_log import RequestLog
from service.core.chain import AdmissionStep, build_chain
from service.core.data_plane import DataPlane
from service.faces.grpc_server import GrpcFace
from service.faces.in_process import InProcessFace
from service.faces.request_limits import RequestLimits

Registration = Callable[[Any], None]
"""Registers a servicer on what it is given (``lambda r: add_XServicer_to_server(fake, r)``)."""


def default_steps(*middle: AdmissionStep) -> list[AdmissionStep]:
    """Request log, ``middle`` (in the chain's order), the priority class and the error mapping."""
    names = {step.name for step in middle}
    steps: list[AdmissionStep] = [RequestLog(), *middle]
    if "priority" not in names:
        position = next(
            (i for i, step in enumerate(steps) if step.name in ("quota", "error_mapping")), len(steps)
        )
        steps.insert(position, PriorityClass())
    if "error_mapping" not in names:
        steps.append(ErrorMapping())
    return steps


def data_plane(registrations: Sequence[Registration], steps: Sequence[AdmissionStep]) -> DataPlane:
    """A :class:`DataPlane` of the registered servicers behind ``steps`` (checked by ``build_chain``)."""
    plane = DataPlane(build_chain(steps))
    for register in registrations:
        register(plane)
    return plane


def grpc_server(
    registrations: Sequence[Registration],
    steps: Sequence[AdmissionStep],
    *,
    limits: RequestLimits | None = None,
    native: Sequence[Registration] = (),
    options: Sequence[tuple[str, Any]] = (),
) -> tuple[grpc.aio.Server, DataPlane]:
    """An unstarted ``grpc.aio`` server serving the servicers through the core, and its data plane.

    ``native`` registers gRPC's own services (health) on the face.
    """
    plane = data_plane(registrations, steps)
    limits = limits or RequestLimits(max_receive_bytes=4 * 1024 * 1024, max_send_bytes=4 * 1024 * 1024)
    server = grpc.aio.server(options=list(options))
    face = GrpcFace(plane, limits)
    for register in native:
        register(face)
    face.attach(server)
    return server, plane


def in_process_face(plane: DataPlane, limits: RequestLimits | None = None) -> InProcessFace:
    """The in-process face of ``plane`` (4 MiB limits unless given)."""
    limits = limits or RequestLimits(max_receive_bytes=4 * 1024 * 1024, max_send_bytes=4 * 1024 * 1024)
    return InProcessFace(plane, limits)
