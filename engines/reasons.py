"""Every ``google.rpc.ErrorInfo`` reason the server sends, with its gRPC code and HTTP status.

A reason is UPPER_SNAKE_CASE (``MODEL_NOT_FOUND``) and names the proximate cause of an error; its
value is its name, so the wire string is the member's name. :data:`REASONS` gives each one the
canonical gRPC status code it travels with (by its ``grpc.StatusCode`` name: the engines import
no gRPC) and the HTTP status the gateway answers for it, which is the code's usual status
(:data:`HTTP_STATUS_BY_GRPC_CODE`) unless the reason says more than the code (a size limit is 413,
not 429; a full store 507).

Stdlib only: the engines, the service and the gateway all import it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Reason(enum.StrEnum):
    """An ErrorInfo reason; the member is its wire string (``Reason.OVERLOADED == "OVERLOADED"``)."""

    ADMIN_ROLE_REQUIRED = "ADMIN_ROLE_REQUIRED"
    AUDIO_TOO_LONG = "AUDIO_TOO_LONG"
    BACKEND_EXITED = "BACKEND_EXITED"
    BATCH_FILE_TOO_LARGE = "BATCH_FILE_TOO_LARGE"
    BATCH_FILE_TOO_MANY_LINES = "BATCH_FILE_TOO_MANY_LINES"
    BATCH_NOT_CANCELLABLE = "BATCH_NOT_CANCELLABLE"
    BATCH_NOT_FOUND = "BATCH_NOT_FOUND"
    CANDIDATE_LABELS_REQUIRED = "CANDIDATE_LABELS_REQUIRED"
    CHAT_TEMPLATE_ERROR = "CHAT_TEMPLATE_ERROR"
    CLASSIFIER_EXISTS = "CLASSIFIER_EXISTS"
    CLASSIFIER_NAME_TAKEN = "CLASSIFIER_NAME_TAKEN"
    CLASSIFIER_NOT_FOUND = "CLASSIFIER_NOT_FOUND"
    CORRUPT_FILE = "CORRUPT_FILE"
    DETECTOR_CORRUPT = "DETECTOR_CORRUPT"
    DETECTOR_NOT_FOUND = "DETECTOR_NOT_FOUND"
    DETECTOR_UNTRUSTED = "DETECTOR_UNTRUSTED"
    DEVICE_UNAVAILABLE = "DEVICE_UNAVAILABLE"
    DRAFT_VOCABULARY_MISMATCH = "DRAFT_VOCABULARY_MISMATCH"
    EMPTY_DOCUMENT = "EMPTY_DOCUMENT"
    EMPTY_FILE = "EMPTY_FILE"
    ENCRYPTED_PDF = "ENCRYPTED_PDF"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    FILE_CHUNKS_INCONSISTENT = "FILE_CHUNKS_INCONSISTENT"
    FILE_NOT_FOUND = "FILE_NOT_FOUND"
    FILE_TOO_LARGE = "FILE_TOO_LARGE"
    FIT_TOO_SLOW = "FIT_TOO_SLOW"
    HUB_MODELS_LIMIT = "HUB_MODELS_LIMIT"
    IMAGE_ASPECT_RATIO_TOO_LARGE = "IMAGE_ASPECT_RATIO_TOO_LARGE"
    IMAGE_TOO_LARGE = "IMAGE_TOO_LARGE"
    INPUT_FILE_NOT_BATCH = "INPUT_FILE_NOT_BATCH"
    INPUT_TOO_LONG = "INPUT_TOO_LONG"
    INSUFFICIENT_MEMORY = "INSUFFICIENT_MEMORY"
    INTERNAL = "INTERNAL"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    INVALID_BATCH_ENDPOINT = "INVALID_BATCH_ENDPOINT"
    INVALID_BATCH_FILE = "INVALID_BATCH_FILE"
    INVALID_BATCH_ID = "INVALID_BATCH_ID"
    INVALID_BATCH_LINE = "INVALID_BATCH_LINE"
    INVALID_BATCH_METADATA = "INVALID_BATCH_METADATA"
    INVALID_CATALOG_ENTRY = "INVALID_CATALOG_ENTRY"
    INVALID_CLASSIFIER_NAME = "INVALID_CLASSIFIER_NAME"
    INVALID_COMPLETION_WINDOW = "INVALID_COMPLETION_WINDOW"
    INVALID_DETECTOR_NAME = "INVALID_DETECTOR_NAME"
    INVALID_EXPIRES_AFTER = "INVALID_EXPIRES_AFTER"
    INVALID_FILE_ID = "INVALID_FILE_ID"
    INVALID_FILE_NAME = "INVALID_FILE_NAME"
    INVALID_FILE_PURPOSE = "INVALID_FILE_PURPOSE"
    INVALID_JSON_SCHEMA = "INVALID_JSON_SCHEMA"
    INVALID_KEEP_ALIVE = "INVALID_KEEP_ALIVE"
    INVALID_MODEL_NAME = "INVALID_MODEL_NAME"
    INVALID_MODEL_OPTION = "INVALID_MODEL_OPTION"
    INVALID_PAGINATION = "INVALID_PAGINATION"
    INVALID_PRIORITY = "INVALID_PRIORITY"
    INVALID_RESPONSE_ID = "INVALID_RESPONSE_ID"
    INVALID_RESPONSE_JSON = "INVALID_RESPONSE_JSON"
    JSON_SCHEMA_TOO_COMPLEX = "JSON_SCHEMA_TOO_COMPLEX"
    KV_POOL_EXHAUSTED = "KV_POOL_EXHAUSTED"
    MALFORMED_REQUEST = "MALFORMED_REQUEST"
    MAX_LOADED_MODELS = "MAX_LOADED_MODELS"
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    MODEL_FILE_INVALID = "MODEL_FILE_INVALID"
    MODEL_LOADED_WITH_OTHER_OPTIONS = "MODEL_LOADED_WITH_OTHER_OPTIONS"
    MODEL_LOAD_FAILED = "MODEL_LOAD_FAILED"
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
    MODEL_PINNED = "MODEL_PINNED"
    MODEL_SOURCE_INVALID = "MODEL_SOURCE_INVALID"
    MODEL_SOURCE_MISSING = "MODEL_SOURCE_MISSING"
    MODEL_UNAVAILABLE = "MODEL_UNAVAILABLE"
    MODEL_UNLOADING = "MODEL_UNLOADING"
    NO_CHAT_TEMPLATE = "NO_CHAT_TEMPLATE"
    OFFSETS_NOT_SUPPORTED = "OFFSETS_NOT_SUPPORTED"
    OPTION_NOT_OVERRIDABLE = "OPTION_NOT_OVERRIDABLE"
    OUTPUT_TRUNCATED = "OUTPUT_TRUNCATED"
    OVERLOADED = "OVERLOADED"
    PAGE_OUT_OF_RANGE = "PAGE_OUT_OF_RANGE"
    PAGE_TOO_COMPLEX = "PAGE_TOO_COMPLEX"
    QUEUE_WAIT_EXCEEDED = "QUEUE_WAIT_EXCEEDED"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    RESPONSE_EXPIRED = "RESPONSE_EXPIRED"
    RESPONSE_ID_EXISTS = "RESPONSE_ID_EXISTS"
    RESPONSE_NOT_CONTINUABLE = "RESPONSE_NOT_CONTINUABLE"
    RESPONSE_NOT_FOUND = "RESPONSE_NOT_FOUND"
    RESPONSE_TOO_LARGE = "RESPONSE_TOO_LARGE"
    RUNTIME_NOT_INSTALLED = "RUNTIME_NOT_INSTALLED"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    STATE_STORE_CONFLICT = "STATE_STORE_CONFLICT"
    STATE_STORE_UNAVAILABLE = "STATE_STORE_UNAVAILABLE"
    STORAGE_FULL = "STORAGE_FULL"
    STORAGE_QUOTA_EXCEEDED = "STORAGE_QUOTA_EXCEEDED"
    STRUCTURED_OUTPUT_UNSUPPORTED = "STRUCTURED_OUTPUT_UNSUPPORTED"
    TASK_NOT_SUPPORTED = "TASK_NOT_SUPPORTED"
    TOKEN_OUT_OF_VOCABULARY = "TOKEN_OUT_OF_VOCABULARY"
    TOOL_CALL_NOT_FOUND = "TOOL_CALL_NOT_FOUND"
    TOO_MANY_BATCHES = "TOO_MANY_BATCHES"
    TOO_MANY_FEATURES = "TOO_MANY_FEATURES"
    TOO_MANY_FILES = "TOO_MANY_FILES"
    TOO_MANY_PAGES = "TOO_MANY_PAGES"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    UNAVAILABLE = "UNAVAILABLE"
    UNKNOWN_BACKEND = "UNKNOWN_BACKEND"
    UNKNOWN_VOICE = "UNKNOWN_VOICE"
    UNSUPPORTED_FORMAT = "UNSUPPORTED_FORMAT"
    UNSUPPORTED_LANGUAGE = "UNSUPPORTED_LANGUAGE"
    UNTRUSTED_MODEL_FILE = "UNTRUSTED_MODEL_FILE"
    WATCH_TOO_LONG = "WATCH_TOO_LONG"
    ZERO_SHOT_NOT_SUPPORTED = "ZERO_SHOT_NOT_SUPPORTED"


@dataclass(frozen=True, slots=True)
class ReasonSpec:
    """What a reason travels with.

    Attributes:
        grpc_code: The ``grpc.StatusCode`` name of the status that carries the reason to clients
            (``"INVALID_ARGUMENT"``).
        http_status: The HTTP status the gateway answers for it, 400-599.
        description: One line: what went wrong, and what the client can do about it.
        retry_later: "Busy now": the gateway adds ``Retry-After`` (a full queue, a wait past the
            queue's limit), which clients honour by retrying the same request.

    """

    grpc_code: str
    http_status: int
    description: str
    retry_later: bool = False


HTTP_STATUS_BY_GRPC_CODE: dict[str, int] = {
    "INVALID_ARGUMENT": 400,
    # The server uses FAILED_PRECONDITION for requests that cannot work as sent (a model that does
    # not serve the task, a pinned model): a client error, not a server one.
    "FAILED_PRECONDITION": 400,
    "NOT_FOUND": 404,
    # A name already taken (a stored response's id): a conflict with the resource's state.
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
    # "Client Closed Request" (nginx): the client went away before the answer was ready.
    "CANCELLED": 499,
}
"""HTTP status of a gRPC status code (by name) that comes without a known reason; any other is 500."""

REASONS: dict[Reason, ReasonSpec] = {
    Reason.AUDIO_TOO_LONG: ReasonSpec(
        "RESOURCE_EXHAUSTED", 413, "the audio is longer than the server's limit in seconds"
    ),
    Reason.ADMIN_ROLE_REQUIRED: ReasonSpec(
        "PERMISSION_DENIED", 403, "the API key needs role admin for this call"
    ),
    Reason.BACKEND_EXITED: ReasonSpec(
        "UNAVAILABLE",
        503,
        "the model's backend process ended while serving the call; retry and a new one starts",
    ),
    Reason.BATCH_FILE_TOO_LARGE: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a batch input file is over the size limit"
    ),
    Reason.BATCH_FILE_TOO_MANY_LINES: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a batch input file has more lines than allowed"
    ),
    Reason.BATCH_NOT_CANCELLABLE: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the batch has finished and cannot be cancelled"
    ),
    Reason.BATCH_NOT_FOUND: ReasonSpec("NOT_FOUND", 404, "no batch has this id"),
    Reason.CANDIDATE_LABELS_REQUIRED: ReasonSpec(
        "FAILED_PRECONDITION", 400, "zero-shot classification needs candidate labels"
    ),
    Reason.CHAT_TEMPLATE_ERROR: ReasonSpec(
        "INVALID_ARGUMENT", 400, "the model's chat template refused the messages"
    ),
    Reason.CLASSIFIER_EXISTS: ReasonSpec(
        "FAILED_PRECONDITION", 400, "a custom classifier of this name exists already"
    ),
    Reason.CLASSIFIER_NAME_TAKEN: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a catalog model already has the classifier's name"
    ),
    Reason.CLASSIFIER_NOT_FOUND: ReasonSpec("NOT_FOUND", 404, "no custom classifier has this name"),
    Reason.CORRUPT_FILE: ReasonSpec("INVALID_ARGUMENT", 400, "an uploaded image or PDF cannot be decoded"),
    Reason.DETECTOR_CORRUPT: ReasonSpec(
        "FAILED_PRECONDITION", 400, "a saved anomaly detector is unreadable; refit it"
    ),
    Reason.DETECTOR_NOT_FOUND: ReasonSpec("NOT_FOUND", 404, "no saved anomaly detector has this name"),
    Reason.DETECTOR_UNTRUSTED: ReasonSpec(
        "FAILED_PRECONDITION", 400, "a saved anomaly detector fails its integrity checks"
    ),
    Reason.DEVICE_UNAVAILABLE: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the model's device is not on this machine"
    ),
    Reason.DRAFT_VOCABULARY_MISMATCH: ReasonSpec(
        "FAILED_PRECONDITION", 400, "a speculative draft model's vocabulary differs"
    ),
    Reason.EMPTY_DOCUMENT: ReasonSpec("INVALID_ARGUMENT", 400, "the document has no text to answer from"),
    Reason.EMPTY_FILE: ReasonSpec("INVALID_ARGUMENT", 400, "the uploaded file is empty"),
    Reason.ENCRYPTED_PDF: ReasonSpec("INVALID_ARGUMENT", 400, "the PDF is encrypted"),
    Reason.FAILED_PRECONDITION: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the system's state does not allow the operation"
    ),
    Reason.FILE_CHUNKS_INCONSISTENT: ReasonSpec(
        "INVALID_ARGUMENT", 400, "an upload's chunks disagree on the file's options"
    ),
    Reason.FILE_NOT_FOUND: ReasonSpec("NOT_FOUND", 404, "no stored file has this id"),
    Reason.FILE_TOO_LARGE: ReasonSpec(
        "RESOURCE_EXHAUSTED", 413, "an uploaded file is over the size limit; retrying fails the same"
    ),
    Reason.FIT_TOO_SLOW: ReasonSpec(
        "RESOURCE_EXHAUSTED", 413, "an anomaly fit ran over the time limit; the same rows fail the same"
    ),
    Reason.HUB_MODELS_LIMIT: ReasonSpec(
        "RESOURCE_EXHAUSTED", 429, "the server holds as many hub models as it may"
    ),
    Reason.IMAGE_ASPECT_RATIO_TOO_LARGE: ReasonSpec(
        "INVALID_ARGUMENT", 400, "an image is too long and thin to read"
    ),
    Reason.IMAGE_TOO_LARGE: ReasonSpec("RESOURCE_EXHAUSTED", 413, "an image has more pixels than allowed"),
    Reason.INPUT_FILE_NOT_BATCH: ReasonSpec(
        "FAILED_PRECONDITION", 400, "a batch's input file was not uploaded with purpose batch"
    ),
    Reason.INPUT_TOO_LONG: ReasonSpec(
        "INVALID_ARGUMENT", 400, "an input is over the model's context or a length limit"
    ),
    Reason.INSUFFICIENT_MEMORY: ReasonSpec(
        "RESOURCE_EXHAUSTED", 429, "no memory to load the model, even after evicting idle ones"
    ),
    Reason.INTERNAL: ReasonSpec(
        "INTERNAL", 500, "a server fault; the log has the details under the request id"
    ),
    Reason.INVALID_ARGUMENT: ReasonSpec(
        "INVALID_ARGUMENT", 400, "the request is malformed or a value is out of range"
    ),
    Reason.INVALID_BATCH_ENDPOINT: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a batch names an endpoint batches cannot call"
    ),
    Reason.INVALID_BATCH_FILE: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a batch input file is not valid JSONL of requests"
    ),
    Reason.INVALID_BATCH_ID: ReasonSpec("INVALID_ARGUMENT", 400, "a batch id is malformed"),
    Reason.INVALID_BATCH_LINE: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a line of a batch input file is not a valid request"
    ),
    Reason.INVALID_BATCH_METADATA: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a batch's metadata is over its limits"
    ),
    Reason.INVALID_CATALOG_ENTRY: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the model's catalog entry is malformed (the operator's)"
    ),
    Reason.INVALID_CLASSIFIER_NAME: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a custom classifier name is not allowed"
    ),
    Reason.INVALID_COMPLETION_WINDOW: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a batch's completion window is not supported"
    ),
    Reason.INVALID_DETECTOR_NAME: ReasonSpec(
        "INVALID_ARGUMENT", 400, "an anomaly detector name is not allowed"
    ),
    Reason.INVALID_EXPIRES_AFTER: ReasonSpec(
        "INVALID_ARGUMENT", 400, "an expires_after is malformed or out of range"
    ),
    Reason.INVALID_FILE_ID: ReasonSpec("INVALID_ARGUMENT", 400, "a file id is malformed"),
    Reason.INVALID_FILE_NAME: ReasonSpec("INVALID_ARGUMENT", 400, "an uploaded file's name is not allowed"),
    Reason.INVALID_FILE_PURPOSE: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a file's purpose is not one the route accepts"
    ),
    Reason.INVALID_JSON_SCHEMA: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a JSON Schema (structured output, tools) is invalid"
    ),
    Reason.INVALID_KEEP_ALIVE: ReasonSpec("INVALID_ARGUMENT", 400, "a keep_alive duration is malformed"),
    Reason.INVALID_MODEL_NAME: ReasonSpec("INVALID_ARGUMENT", 400, "a model name is malformed"),
    # Also answered FAILED_PRECONDITION (same HTTP status) when the catalog's own options are bad.
    Reason.INVALID_MODEL_OPTION: ReasonSpec("INVALID_ARGUMENT", 400, "a model option's value is invalid"),
    Reason.INVALID_PAGINATION: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a list call's after, limit or order is invalid"
    ),
    Reason.INVALID_PRIORITY: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a request priority is not one the server knows"
    ),
    Reason.INVALID_RESPONSE_ID: ReasonSpec("INVALID_ARGUMENT", 400, "a stored response id is malformed"),
    Reason.INVALID_RESPONSE_JSON: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a response to store is not valid JSON"
    ),
    Reason.JSON_SCHEMA_TOO_COMPLEX: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a JSON Schema or pattern is over a complexity bound"
    ),
    Reason.KV_POOL_EXHAUSTED: ReasonSpec(
        "RESOURCE_EXHAUSTED", 429, "the request can never fit the model's KV pool; ask for fewer tokens"
    ),
    Reason.MALFORMED_REQUEST: ReasonSpec("INVALID_ARGUMENT", 400, "the request message cannot be parsed"),
    Reason.MAX_LOADED_MODELS: ReasonSpec(
        "RESOURCE_EXHAUSTED", 429, "as many models are loaded as allowed, none idle to evict"
    ),
    Reason.MESSAGE_TOO_LARGE: ReasonSpec(
        "RESOURCE_EXHAUSTED", 413, "a gRPC request or response is over the message size limit"
    ),
    Reason.MODEL_FILE_INVALID: ReasonSpec("INTERNAL", 500, "a model or classifier file is unreadable"),
    Reason.MODEL_LOADED_WITH_OTHER_OPTIONS: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the model is loaded with other options"
    ),
    Reason.MODEL_LOAD_FAILED: ReasonSpec("INTERNAL", 500, "the model failed to load; its status says why"),
    Reason.MODEL_NOT_FOUND: ReasonSpec("NOT_FOUND", 404, "the named model is not in the catalog"),
    Reason.MODEL_PINNED: ReasonSpec("FAILED_PRECONDITION", 400, "the model is pinned and cannot be unloaded"),
    # Engines raise these as ModelLoadError (INTERNAL); the model manager answers them as the catalog's.
    Reason.MODEL_SOURCE_INVALID: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the catalog entry's source is of the wrong kind"
    ),
    Reason.MODEL_SOURCE_MISSING: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the catalog entry's source does not exist"
    ),
    Reason.MODEL_UNAVAILABLE: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the catalog entry failed its backend's checks"
    ),
    Reason.MODEL_UNLOADING: ReasonSpec(
        "UNAVAILABLE", 503, "the model is unloading; retry and it loads again"
    ),
    Reason.NO_CHAT_TEMPLATE: ReasonSpec("INVALID_ARGUMENT", 400, "the model has no chat template"),
    Reason.OFFSETS_NOT_SUPPORTED: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the model's tokenizer cannot give character offsets"
    ),
    Reason.OPTION_NOT_OVERRIDABLE: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a LoadModel caller may not set this option"
    ),
    Reason.OUTPUT_TRUNCATED: ReasonSpec("INVALID_ARGUMENT", 400, "the answer was cut at the token limit"),
    Reason.OVERLOADED: ReasonSpec(
        "RESOURCE_EXHAUSTED", 429, "a queue is full; retry shortly", retry_later=True
    ),
    Reason.PAGE_OUT_OF_RANGE: ReasonSpec("INVALID_ARGUMENT", 400, "a page number is past the document's end"),
    Reason.PAGE_TOO_COMPLEX: ReasonSpec(
        "RESOURCE_EXHAUSTED", 413, "a PDF page took longer than ocr_page_timeout_s"
    ),
    Reason.QUEUE_WAIT_EXCEEDED: ReasonSpec(
        "RESOURCE_EXHAUSTED", 429, "waited past the queue's limit; retry", retry_later=True
    ),
    Reason.QUOTA_EXCEEDED: ReasonSpec(
        "RESOURCE_EXHAUSTED", 429, "the API key is over its quota; RetryInfo says when to retry"
    ),
    Reason.RESPONSE_EXPIRED: ReasonSpec("NOT_FOUND", 404, "the stored response has expired"),
    Reason.RESPONSE_ID_EXISTS: ReasonSpec("ALREADY_EXISTS", 409, "a stored response has this id already"),
    Reason.RESPONSE_NOT_CONTINUABLE: ReasonSpec(
        "FAILED_PRECONDITION",
        400,
        "the response was stored whole (PutStoredResponse), so it cannot be continued",
    ),
    Reason.RESPONSE_NOT_FOUND: ReasonSpec("NOT_FOUND", 404, "no stored response has this id"),
    Reason.RESPONSE_TOO_LARGE: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a response to store is over the size limit"
    ),
    Reason.RUNTIME_NOT_INSTALLED: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the backend's runtime package is not installed"
    ),
    Reason.SHUTTING_DOWN: ReasonSpec("UNAVAILABLE", 503, "the server is shutting down"),
    Reason.STATE_STORE_CONFLICT: ReasonSpec(
        "UNAVAILABLE", 503, "other replicas kept changing the saved state; retry"
    ),
    Reason.STATE_STORE_UNAVAILABLE: ReasonSpec(
        "UNAVAILABLE", 503, "the shared state store is unreachable; retry later"
    ),
    Reason.STORAGE_FULL: ReasonSpec(
        "RESOURCE_EXHAUSTED", 507, "the state store is out of space; the operator must free some"
    ),
    Reason.STORAGE_QUOTA_EXCEEDED: ReasonSpec(
        "RESOURCE_EXHAUSTED", 507, "the store holds as much as allowed; delete something"
    ),
    Reason.STRUCTURED_OUTPUT_UNSUPPORTED: ReasonSpec(
        "INVALID_ARGUMENT", 400, "the backend cannot constrain output this way"
    ),
    Reason.TASK_NOT_SUPPORTED: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the model exists but does not serve the task"
    ),
    Reason.TOKEN_OUT_OF_VOCABULARY: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a token id is outside the model's vocabulary"
    ),
    Reason.TOOL_CALL_NOT_FOUND: ReasonSpec(
        "INVALID_ARGUMENT", 400, "a tool result answers no tool call of the conversation"
    ),
    Reason.TOO_MANY_BATCHES: ReasonSpec(
        "RESOURCE_EXHAUSTED", 429, "the key has as many unfinished batches as allowed"
    ),
    Reason.TOO_MANY_FEATURES: ReasonSpec(
        "INVALID_ARGUMENT", 400, "anomaly rows have more features than allowed"
    ),
    Reason.TOO_MANY_FILES: ReasonSpec(
        "RESOURCE_EXHAUSTED", 507, "the key keeps as many files as allowed; delete some first"
    ),
    Reason.TOO_MANY_PAGES: ReasonSpec("RESOURCE_EXHAUSTED", 413, "a document has more pages than allowed"),
    Reason.UNAUTHENTICATED: ReasonSpec("UNAUTHENTICATED", 401, "missing, invalid or repeated API key"),
    Reason.UNAVAILABLE: ReasonSpec("UNAVAILABLE", 503, "the server or a model is not ready; retry later"),
    # The backend comes from the catalog, so an unknown one is the operator's to fix.
    Reason.UNKNOWN_BACKEND: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the catalog entry names a backend the server lacks"
    ),
    Reason.UNKNOWN_VOICE: ReasonSpec("INVALID_ARGUMENT", 400, "the speech model has no voice of this id"),
    Reason.UNSUPPORTED_FORMAT: ReasonSpec(
        "INVALID_ARGUMENT", 400, "the uploaded file's type is not supported, or it cannot be decoded"
    ),
    Reason.UNSUPPORTED_LANGUAGE: ReasonSpec(
        "INVALID_ARGUMENT", 400, "the engine has no model for this language"
    ),
    Reason.UNTRUSTED_MODEL_FILE: ReasonSpec(
        "INTERNAL", 500, "a classifier file holds untrusted types or fails its checksum"
    ),
    Reason.WATCH_TOO_LONG: ReasonSpec("DEADLINE_EXCEEDED", 504, "WatchModel ran past its longest watch"),
    Reason.ZERO_SHOT_NOT_SUPPORTED: ReasonSpec(
        "FAILED_PRECONDITION", 400, "the classifier cannot take candidate labels"
    ),
}
"""Each reason's spec (a member equals its wire string, so ``REASONS["OVERLOADED"]`` works too)."""

_missing = set(Reason) - set(REASONS)
if _missing:
    raise RuntimeError(f"reasons without a spec in REASONS: {sorted(_missing)}")

_BY_WIRE: dict[str, ReasonSpec] = dict(REASONS)


def spec_of(reason: str | None) -> ReasonSpec | None:
    """The spec of a reason, a member or the wire string of a received ErrorInfo.

    Returns:
        Its :class:`ReasonSpec`, or ``None`` for an empty reason or one the server never sends.

    """
    return _BY_WIRE.get(reason) if reason else None
