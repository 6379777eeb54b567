from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Task(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_UNSPECIFIED: _ClassVar[Task]
    TASK_GENERATE: _ClassVar[Task]
    TASK_EMBED: _ClassVar[Task]
    TASK_CLASSIFY: _ClassVar[Task]
    TASK_EXTRACT_ENTITIES: _ClassVar[Task]
    TASK_RERANK: _ClassVar[Task]
    TASK_OCR: _ClassVar[Task]
    TASK_LAYOUT: _ClassVar[Task]
    TASK_DOCUMENT_QA: _ClassVar[Task]
    TASK_EXTRACT_FIELDS: _ClassVar[Task]
    TASK_CLASSIFY_DOCUMENT: _ClassVar[Task]
    TASK_TRANSCRIBE: _ClassVar[Task]
    TASK_SYNTHESIZE_SPEECH: _ClassVar[Task]
    TASK_GENERATE_IMAGE: _ClassVar[Task]

class ModelStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_STATUS_UNSPECIFIED: _ClassVar[ModelStatus]
    MODEL_STATUS_NOT_LOADED: _ClassVar[ModelStatus]
    MODEL_STATUS_LOADING: _ClassVar[ModelStatus]
    MODEL_STATUS_READY: _ClassVar[ModelStatus]
    MODEL_STATUS_UNLOADING: _ClassVar[ModelStatus]
    MODEL_STATUS_ERROR: _ClassVar[ModelStatus]
TASK_UNSPECIFIED: Task
TASK_GENERATE: Task
TASK_EMBED: Task
TASK_CLASSIFY: Task
TASK_EXTRACT_ENTITIES: Task
TASK_RERANK: Task
TASK_OCR: Task
TASK_LAYOUT: Task
TASK_DOCUMENT_QA: Task
TASK_EXTRACT_FIELDS: Task
TASK_CLASSIFY_DOCUMENT: Task
TASK_TRANSCRIBE: Task
TASK_SYNTHESIZE_SPEECH: Task
TASK_GENERATE_IMAGE: Task
MODEL_STATUS_UNSPECIFIED: ModelStatus
MODEL_STATUS_NOT_LOADED: ModelStatus
MODEL_STATUS_LOADING: ModelStatus
MODEL_STATUS_READY: ModelStatus
MODEL_STATUS_UNLOADING: ModelStatus
MODEL_STATUS_ERROR: ModelStatus

class MemoryUsage(_message.Message):
    __slots__ = ("ram_bytes", "vram_bytes")
    RAM_BYTES_FIELD_NUMBER: _ClassVar[int]
    VRAM_BYTES_FIELD_NUMBER: _ClassVar[int]
    ram_bytes: int
    vram_bytes: int
    def __init__(self, ram_bytes: _Optional[int] = ..., vram_bytes: _Optional[int] = ...) -> None: ...

class KvCacheUsage(_message.Message):
    __slots__ = ("cells_used", "cells_total")
    CELLS_USED_FIELD_NUMBER: _ClassVar[int]
    CELLS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    cells_used: int
    cells_total: int
    def __init__(self, cells_used: _Optional[int] = ..., cells_total: _Optional[int] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("name", "tasks", "backend", "source", "status", "status_detail", "device", "memory", "keep_alive", "pinned", "loaded_at_unix_ms", "expires_at_unix_ms", "active_requests", "kv_cache", "options", "required_memory", "backend_process")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_DETAIL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    BACKEND_PROCESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    tasks: _containers.RepeatedScalarFieldContainer[Task]
    backend: str
    source: str
    status: ModelStatus
    status_detail: str
    device: str
    memory: MemoryUsage
    keep_alive: str
    pinned: bool
    loaded_at_unix_ms: int
    expires_at_unix_ms: int
    active_requests: int
    kv_cache: KvCacheUsage
    options: _struct_pb2.Struct
    required_memory: MemoryUsage
    backend_process: BackendProcess
    def __init__(self, name: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[Task, str]]] = ..., backend: _Optional[str] = ..., source: _Optional[str] = ..., status: _Optional[_Union[ModelStatus, str]] = ..., status_detail: _Optional[str] = ..., device: _Optional[str] = ..., memory: _Optional[_Union[MemoryUsage, _Mapping]] = ..., keep_alive: _Optional[str] = ..., pinned: _Optional[bool] = ..., loaded_at_unix_ms: _Optional[int] = ..., expires_at_unix_ms: _Optional[int] = ..., active_requests: _Optional[int] = ..., kv_cache: _Optional[_Union[KvCacheUsage, _Mapping]] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., required_memory: _Optional[_Union[MemoryUsage, _Mapping]] = ..., backend_process: _Optional[_Union[BackendProcess, _Mapping]] = ...) -> None: ...

class BackendProcess(_message.Message):
    __slots__ = ("pid", "started_at_unix_ms", "rss_bytes", "starts")
    PID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    STARTS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    started_at_unix_ms: int
    rss_bytes: int
    starts: int
    def __init__(self, pid: _Optional[int] = ..., started_at_unix_ms: _Optional[int] = ..., rss_bytes: _Optional[int] = ..., starts: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("task", "loaded_only")
    TASK_FIELD_NUMBER: _ClassVar[int]
    LOADED_ONLY_FIELD_NUMBER: _ClassVar[int]
    task: Task
    loaded_only: bool
    def __init__(self, task: _Optional[_Union[Task, str]] = ..., loaded_only: _Optional[bool] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class LoadModelRequest(_message.Message):
    __slots__ = ("name", "keep_alive", "pinned", "options")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    keep_alive: str
    pinned: bool
    options: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., keep_alive: _Optional[str] = ..., pinned: _Optional[bool] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class LoadModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class UnloadModelRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class UnloadModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class WatchModelRequest(_message.Message):
    __slots__ = ("name", "load", "keep_alive", "pinned", "options")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    load: bool
    keep_alive: str
    pinned: bool
    options: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., load: _Optional[bool] = ..., keep_alive: _Optional[str] = ..., pinned: _Optional[bool] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class WatchModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...
