"""Step ``authentication``: the call's API key, checked against the configured keys.

The key comes from the call's credentials (``authorization: Bearer <key>``; the scheme in any
case, RFC 7235 section 2.1), matched against every key's salted hash in constant time
(:meth:`service.shared.api_keys.ApiKeys.match`). A call with none, a wrong one or more than one
(whichever is right must not be picked: a proxy that adds its own, a client trying several) is
refused UNAUTHENTICATED, reason ``UNAUTHENTICATED``. A call whose face vouches for its caller
(:attr:`~service.core.context.CallContext.trusted_caller`: a batch line runs under the key that
submitted the batch, checked when it was submitted) takes that caller, the key's current policy
applied. Public methods (health) need no key unless ``public_health`` is off.

An admitted call's :attr:`~service.core.context.CallContext.caller` names the key, its role and
its share (the key's priority class and weight); the ``priority`` step may lower the class.
"""

from __future__ import annotations

from typing import Any

from engines.errors import RuntimeServiceError
from engines.fair_share import Caller, Priority, Share
from engines.reasons import Reason
from service.core.chain import CheckStep
from service.core.context import CallContext
from service.shared.api_keys import ApiKeys

PRIORITY_BY_NAME = {"interactive": Priority.INTERACTIVE, "batch": Priority.BATCH}
"""A key policy's ``priority`` (and ``x-ur-priority``'s values) as queue classes."""


class UnauthenticatedError(RuntimeServiceError, status="UNAUTHENTICATED", reason=Reason.UNAUTHENTICATED):
    """No valid API key (HTTP 401 at the gateway)."""


class Authentication(CheckStep):
    """Admits calls with one valid API key and names their caller (see the module).

    Args:
        keys: The configured keys (a non-empty :class:`~service.shared.api_keys.ApiKeys`).
        public_health: Let public methods (health, reflection) through without a key.

    """

    name = "authentication"

    def __init__(self, keys: ApiKeys, *, public_health: bool = True) -> None:
        self.keys = keys
        self.public_health = public_health

    def identify(self, ctx: CallContext) -> Caller | None:
        """The caller of ``ctx``'s credentials, ``None`` for a public method that needs none.

        Cheap and side-effect free, so a face may call it before reading a request (the gRPC
        face refuses a wrong key before parsing the message).

        Raises:
            UnauthenticatedError: No key, a wrong one, or more than one.

        """
        if ctx.method.public and self.public_health:
            return None
        if ctx.trusted_caller is not None:
            return self.caller(ctx.trusted_caller.name, lane=ctx.trusted_caller.lane)
        if len(ctx.credentials) > 1:
            raise UnauthenticatedError("more than one authorization metadata entry: send one API key")
        matched = self.keys.match(ctx.credentials[0]) if ctx.credentials else None
        if matched is None:
            raise UnauthenticatedError("missing or invalid API key")
        return self.caller(matched[0])

    def caller(self, name: str, *, lane: str | None = None) -> Caller:
        """The :class:`Caller` of key ``name`` under its current policy.

        Raises:
            UnauthenticatedError: No key of that name is configured (any longer).

        """
        if name not in self.keys.names:
            raise UnauthenticatedError(f"the API key {name!r} is no longer configured")
        policy = self.keys.policy(name)
        share = Share(name, PRIORITY_BY_NAME[policy.priority], policy.weight)
        return Caller(name=name, role=policy.role, share=share, lane=name if lane is None else lane)

    def admit(self, ctx: CallContext, request: Any) -> None:
        """Name the call's caller from its key (see the module), or refuse it."""
        caller = self.identify(ctx)
        ctx.credentials = ()  # checked: nothing after this step reads the key
        if caller is not None:
            ctx.caller = caller
