from universal_runtime.v1 import model_service_pb2 as _model_service_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LoadRequest(_message.Message):
    __slots__ = ("model", "backend", "tasks", "source", "device", "options_json")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    model: str
    backend: str
    tasks: _containers.RepeatedScalarFieldContainer[str]
    source: str
    device: str
    options_json: str
    def __init__(self, model: _Optional[str] = ..., backend: _Optional[str] = ..., tasks: _Optional[_Iterable[str]] = ..., source: _Optional[str] = ..., device: _Optional[str] = ..., options_json: _Optional[str] = ...) -> None: ...

class LoadResponse(_message.Message):
    __slots__ = ("memory", "pid")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    memory: _model_service_pb2.MemoryUsage
    pid: int
    def __init__(self, memory: _Optional[_Union[_model_service_pb2.MemoryUsage, _Mapping]] = ..., pid: _Optional[int] = ...) -> None: ...

class UnloadRequest(_message.Message):
    __slots__ = ("drain_timeout_ms",)
    DRAIN_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    drain_timeout_ms: int
    def __init__(self, drain_timeout_ms: _Optional[int] = ...) -> None: ...

class UnloadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("serving",)
    SERVING_FIELD_NUMBER: _ClassVar[int]
    serving: bool
    def __init__(self, serving: _Optional[bool] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("memory", "sequences_running", "sequences_waiting", "kv_cache", "kv_cells_cached", "encoder_queue_depth", "encoder_requests_running", "encoder_requests_waiting", "has_generation", "has_encoder")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_RUNNING_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_FIELD_NUMBER: _ClassVar[int]
    KV_CELLS_CACHED_FIELD_NUMBER: _ClassVar[int]
    ENCODER_QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    ENCODER_REQUESTS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    ENCODER_REQUESTS_WAITING_FIELD_NUMBER: _ClassVar[int]
    HAS_GENERATION_FIELD_NUMBER: _ClassVar[int]
    HAS_ENCODER_FIELD_NUMBER: _ClassVar[int]
    memory: _model_service_pb2.MemoryUsage
    sequences_running: int
    sequences_waiting: int
    kv_cache: _model_service_pb2.KvCacheUsage
    kv_cells_cached: int
    encoder_queue_depth: int
    encoder_requests_running: int
    encoder_requests_waiting: int
    has_generation: bool
    has_encoder: bool
    def __init__(self, memory: _Optional[_Union[_model_service_pb2.MemoryUsage, _Mapping]] = ..., sequences_running: _Optional[int] = ..., sequences_waiting: _Optional[int] = ..., kv_cache: _Optional[_Union[_model_service_pb2.KvCacheUsage, _Mapping]] = ..., kv_cells_cached: _Optional[int] = ..., encoder_queue_depth: _Optional[int] = ..., encoder_requests_running: _Optional[int] = ..., encoder_requests_waiting: _Optional[int] = ..., has_generation: _Optional[bool] = ..., has_encoder: _Optional[bool] = ...) -> None: ...
