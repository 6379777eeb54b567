"""Per-key quotas: request rate, tokens and encoder inputs a minute, streams in flight.

A key's quotas come from its policy in the keys file (:class:`service.shared.api_keys.KeyPolicy`);
:class:`service.core.admission.quota.Quota` asks :meth:`Quotas.admit` before each call and
tells the returned :class:`Admission` what the call used when it ends. Four limits, each
optional:

- ``requests_per_second`` with ``burst``: a token bucket (the classic algorithm: a bucket of
  ``burst`` tokens refilled at ``requests_per_second``; a call takes one token and is refused
  while the bucket holds less than one).
- ``tokens_per_minute``: prompt + generated tokens (the ``usage`` of every answer that has one:
  generation, and the encoders' prompt tokens), refilled at ``tokens_per_minute / 60`` a second.
  A call's size is known only once it ends, so it is charged then, and the bucket may go into
  debt: a big call is served whole and the NEXT call waits until the debt is repaid. A call is
  admitted while the bucket holds at least one token. A stream cut before its end (no usage in
  its last message) is charged nothing.
- ``inputs_per_minute``: encoder inputs (texts to embed, classify or tag, documents to rerank),
  counted when the call is admitted; a call whose inputs do not fit the bucket waits, and one
  with more inputs than the whole minute's allowance is refused for good.
- ``max_concurrent_streams``: RPCs in flight whose request or response is a stream.

A refused call ends RESOURCE_EXHAUSTED, ErrorInfo reason ``QUOTA_EXCEEDED`` (metadata: ``limit``,
the policy field that refused it, and ``api_key``, the key's name), with a ``google.rpc.RetryInfo``
whose ``retry_delay`` is when the bucket will allow the call (none when waiting cannot help or
the server cannot know: a request over the whole allowance, a stream limit), plus the request and
token limits' state for the gateway's ``x-ratelimit-*`` headers. An admitted call of a key with a
request rate or ``tokens_per_minute`` carries the same headers in its initial metadata
(:meth:`Quotas.rate_limit_metadata`), which the gateway copies to every answer.

**Per replica.** Every server process keeps its own buckets in memory: N replicas behind a
balancer admit up to N times a key's rate. The state is one small object per configured key with
a quota, made at start-up; nothing is kept per client-chosen string. All of it runs on the
server's event loop, so a check and its charge happen with no await between them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engines.errors import ResourceExhaustedError
from engines.reasons import Reason
from service import metrics
from service.shared.api_keys import ApiKeys, KeyPolicy
from service.shared.rate_limits import rate_limit_headers

QUOTA_EXCEEDED = Reason.QUOTA_EXCEEDED
"""ErrorInfo reason of a call refused by its key's quota."""


# The encoder RPCs whose inputs count against inputs_per_minute, and the field that holds them.
ENCODER_INPUT_FIELDS: dict[str, str] = {
    "/universal_runtime.v1.InferenceService/Embed": "inputs",
    "/universal_runtime.v1.InferenceService/Classify": "inputs",
    "/universal_runtime.v1.InferenceService/ExtractEntities": "inputs",
    "/universal_runtime.v1.InferenceService/Rerank": "documents",
}


def encoder_inputs(method: str, request: Any) -> int:
    """How many encoder inputs ``request`` of RPC ``method`` (full path) carries; 0 for other RPCs.

    A request the server could not parse (an error object in its place) counts 0: it is refused
    further in.
    """
    field = ENCODER_INPUT_FIELDS.get(method)
    if field is None:
        return 0
    values = getattr(request, field, None)
    return 0 if values is None else len(values)


def usage_tokens(message: Any) -> int:
    """Prompt + generated tokens of an answer with a ``usage`` field set; 0 without one."""
    has_field = getattr(message, "HasField", None)
    try:
        if has_field is None or not has_field("usage"):
            return 0
    except ValueError:  # a message type without a usage field
        return 0
    usage = message.usage
    return max(0, usage.prompt_tokens) + max(0, usage.completion_tokens)


FLOAT_SLACK = 1e-9
"""Tokens a bucket may lack and still allow a call: float rounding, not a real shortfall."""


class TokenBucket:
    """A token bucket: ``capacity`` tokens, refilled at ``per_second``; its balance may go below 0.

    Args:
        capacity: The most tokens it holds (> 0).
        per_second: Refill rate, tokens a second (> 0).
        now: The clock's time at creation; the bucket starts full.

    """

    __slots__ = ("balance", "capacity", "per_second", "updated")

    def __init__(self, capacity: float, per_second: float, now: float) -> None:
        self.capacity = float(capacity)
        self.per_second = float(per_second)
        self.balance = self.capacity
        self.updated = now

    def refill(self, now: float) -> None:
        """Add what accrued since the last refill, up to ``capacity`` (a clock going back adds nothing)."""
        if now > self.updated:
            self.balance = min(self.capacity, self.balance + (now - self.updated) * self.per_second)
            self.updated = now

    def wait_s(self, amount: float) -> float:
        """Seconds until the balance reaches ``amount`` (0: it has it now; ``inf``: over ``capacity``).

        A shortfall under :data:`FLOAT_SLACK` counts as none: refills that add up to a whole
        token exactly (3 x 1/60 s at 20 a second) may sum to 0.9999999999 in floats.
        """
        if amount > self.capacity:
            return math.inf
        shortfall = amount - self.balance
        return 0.0 if shortfall <= FLOAT_SLACK else shortfall / self.per_second

    def take(self, amount: float) -> None:
        """Take ``amount`` tokens; the balance may go negative (a debt later calls wait out)."""
        self.balance -= amount

    def remaining(self) -> int:
        """Whole tokens available now (0 in debt)."""
        return max(0, math.floor(self.balance))

    def until_full_s(self) -> float:
        """Seconds until the bucket is full again (OpenAI's ``x-ratelimit-reset-*``)."""
        return max(0.0, (self.capacity - self.balance) / self.per_second)


@dataclass(frozen=True, slots=True)
class QuotaRefusal:
    """A call its key's quota refuses.

    Attributes:
        key: The key's name.
        limit: The policy field that refused it (``requests_per_second``, ``tokens_per_minute``,
            ``inputs_per_minute``, ``max_concurrent_streams``).
        message: The client's explanation.
        retry_after_s: Seconds until the call would be allowed; ``None`` when waiting cannot help
            or cannot be known.
        state: The request and token limits' state (:meth:`Quotas.rate_limit_state`).

    """

    key: str
    limit: str
    message: str
    retry_after_s: float | None
    state: dict[str, str]

    def error(self) -> QuotaExceededError:
        """RESOURCE_EXHAUSTED, reason ``QUOTA_EXCEEDED``, retry delay ``retry_after_s`` when known."""
        metadata = {"limit": self.limit, "api_key": self.key, **self.state}
        return QuotaExceededError(self.message, retry_after_s=self.retry_after_s, **metadata)


class QuotaExceededError(ResourceExhaustedError, reason=Reason.QUOTA_EXCEEDED):
    """A call refused by its key's quota (:class:`QuotaRefusal`); HTTP 429 at the gateway.

    Args:
        message: The client's explanation.
        retry_after_s: Seconds until the call would be allowed (a ``google.rpc.RetryInfo``
            detail, ``Retry-After`` at the gateway); ``None`` when unknown.
        metadata: ``ErrorInfo.metadata`` (``limit``, ``api_key`` and the rate-limit state).

    """

    def __init__(self, message: str, *, retry_after_s: float | None = None, **metadata: object) -> None:
        super().__init__(message, **metadata)
        self.retry_after_s = retry_after_s


class Admission:
    """An admitted call's hold on its key's quota: charge its tokens and free its stream slot once.

    :meth:`finish` is idempotent; call it when the call ends, whatever the outcome.
    """

    __slots__ = ("_quota", "_stream")

    def __init__(self, quota: _KeyQuota | None, stream: bool) -> None:
        self._quota = quota
        self._stream = stream

    def finish(self, tokens: int = 0) -> None:
        """Charge ``tokens`` (prompt + generated; may put the bucket in debt) and free the stream slot."""
        quota, self._quota = self._quota, None
        if quota is None:
            return
        if tokens > 0 and quota.tokens is not None:
            quota.tokens.refill(quota.clock())
            quota.tokens.take(tokens)
        if self._stream:
            quota.streams -= 1


NO_QUOTA = Admission(None, stream=False)
"""The admission of a call whose key has no quota (nothing to charge or free)."""


class _KeyQuota:
    """One key's buckets and its streams in flight."""

    __slots__ = ("clock", "inputs", "name", "policy", "requests", "streams", "tokens")

    def __init__(self, name: str, policy: KeyPolicy, clock: Callable[[], float]) -> None:
        now = clock()
        self.name = name
        self.policy = policy
        self.clock = clock
        rps, size = policy.requests_per_second, policy.bucket_size
        self.requests = None if rps is None or size is None else TokenBucket(size, rps, now)
        tpm, ipm = policy.tokens_per_minute, policy.inputs_per_minute
        self.tokens = None if tpm is None else TokenBucket(tpm, tpm / 60, now)
        self.inputs = None if ipm is None else TokenBucket(ipm, ipm / 60, now)
        self.streams = 0


class Quotas:
    """Every configured key's quota state, for one server process.

    Args:
        keys: The server's keys; a state is made for each key whose policy sets a quota.
        clock: Monotonic seconds (``time.monotonic``; tests pass their own).

    """

    def __init__(self, keys: ApiKeys, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_key = {
            name: _KeyQuota(name, keys.policy(name), clock)
            for name in keys.names  # bounded: the configured keys
            if keys.policy(name).has_quota
        }

    def __bool__(self) -> bool:
        """Whether any key has a quota (without one the admission step is not needed)."""
        return bool(self._by_key)

    def admit(self, key: str, *, inputs: int = 0, stream: bool = False) -> Admission | QuotaRefusal:
        """Admit a call of key ``key`` (its name) or say why not; an admitted call is charged at once.

        Args:
            key: The key's name ("" or a key without quota: always admitted, nothing kept).
            inputs: The call's encoder inputs (:func:`encoder_inputs`).
            stream: Whether the call streams (its request or its response).

        Returns:
            An :class:`Admission` (call its ``finish`` when the call ends), or the
            :class:`QuotaRefusal` of the limit that allows the call last.

        """
        quota = self._by_key.get(key)
        if quota is None:
            return NO_QUOTA
        now = self._clock()
        waits: list[tuple[float, str]] = []  # (seconds, limit): at most four
        for limit, bucket, amount in (
            ("requests_per_second", quota.requests, 1),
            ("tokens_per_minute", quota.tokens, 1),  # not in debt
            ("inputs_per_minute", quota.inputs if inputs else None, inputs),
        ):
            if bucket is not None:
                bucket.refill(now)
                wait = bucket.wait_s(amount)
                if wait > 0:
                    waits.append((wait, limit))
        streams = quota.policy.max_concurrent_streams
        if stream and streams is not None and quota.streams >= streams:
            # Unknown (NaN): a slot frees when one of the key's streams ends.
            waits.append((math.nan, "max_concurrent_streams"))
        if waits:
            return self._refusal(quota, waits, inputs)
        if quota.requests is not None:
            quota.requests.take(1)
        if inputs and quota.inputs is not None:
            quota.inputs.take(inputs)
        if stream:
            quota.streams += 1
        return Admission(quota, stream)

    def _refusal(self, quota: _KeyQuota, waits: list[tuple[float, str]], inputs: int) -> QuotaRefusal:
        """The refusal of the limit that allows the call last (one that never will, or unknown, first)."""

        def order(wait: tuple[float, str]) -> float:
            return math.inf if math.isnan(wait[0]) else wait[0]

        seconds, limit = max(waits, key=order)
        message = _message(quota, limit, seconds, inputs)
        retry = seconds if math.isfinite(seconds) else None
        metrics.quota_exceeded(quota.name, limit)
        return QuotaRefusal(quota.name, limit, message, retry, self.rate_limit_state(quota.name))

    def rate_limit_state(self, key: str) -> dict[str, str]:
        """The request and token limits of ``key`` now, as strings, for OpenAI's ``x-ratelimit-*`` headers.

        ``limit_requests`` (the bucket's size), ``remaining_requests`` and ``reset_requests_s``
        (seconds until the bucket is full) when the key has a request rate; the same ``_tokens``
        entries when it has ``tokens_per_minute``; ``{}`` for a key without either.
        """
        quota = self._by_key.get(key)
        if quota is None:
            return {}
        now = self._clock()
        state: dict[str, str] = {}
        for name, bucket in (("requests", quota.requests), ("tokens", quota.tokens)):
            if bucket is not None:
                bucket.refill(now)
                state[f"limit_{name}"] = str(math.floor(bucket.capacity))
                state[f"remaining_{name}"] = str(bucket.remaining())
                state[f"reset_{name}_s"] = f"{bucket.until_full_s():.3f}"
        return state

    def rate_limit_metadata(self, key: str) -> tuple[tuple[str, str], ...]:
        """OpenAI's ``x-ratelimit-*`` headers of ``key`` now, as gRPC metadata entries.

        :meth:`rate_limit_state` written by :func:`service.shared.rate_limits.rate_limit_headers`
        (as a 429's headers are): ``x-ratelimit-limit-requests`` (the bucket's size),
        ``x-ratelimit-remaining-requests`` and ``x-ratelimit-reset-requests`` (``1s``, ``250ms``)
        for a request rate, the ``-tokens`` ones for ``tokens_per_minute``; ``()`` for a key
        without either (or no key, ``""``). Never the key itself nor its name.
        """
        return tuple(rate_limit_headers(self.rate_limit_state(key)).items())


def _message(quota: _KeyQuota, limit: str, wait: float, inputs: int) -> str:
    """The client's explanation of a refusal by ``limit`` (a policy field) that ends in ``wait`` seconds."""
    key, policy = quota.name, quota.policy
    retry = f"retry in {wait:.3f} s"
    if limit == "requests_per_second":
        return (
            f"API key {key!r} is over its quota of {policy.requests_per_second:g} requests a second "
            f"(burst {policy.bucket_size}); {retry}"
        )
    if limit == "tokens_per_minute":
        return f"API key {key!r} used its quota of {policy.tokens_per_minute} tokens a minute; {retry}"
    if limit == "max_concurrent_streams":
        return (
            f"API key {key!r} has {quota.streams} streams open, its limit (max_concurrent_streams "
            f"{policy.max_concurrent_streams}); retry when one ends"
        )
    if math.isinf(wait):
        return (
            f"the request has {inputs} inputs, more than API key {key!r}'s quota of "
            f"{policy.inputs_per_minute} inputs a minute; send at most {policy.inputs_per_minute} per request"
        )
    return (
        f"API key {key!r} is over its quota of {policy.inputs_per_minute} encoder inputs a minute "
        f"({inputs} in this request); {retry}"
    )
