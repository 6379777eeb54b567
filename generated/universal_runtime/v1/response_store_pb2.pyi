from universal_runtime.v1 import generation_pb2 as _generation_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoredResponse(_message.Message):
    __slots__ = ("id", "created_at", "previous_response_id", "response_json", "input_items_json", "expires_at", "turns")
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_JSON_FIELD_NUMBER: _ClassVar[int]
    INPUT_ITEMS_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: int
    previous_response_id: str
    response_json: bytes
    input_items_json: bytes
    expires_at: int
    turns: _containers.RepeatedCompositeFieldContainer[ResponseTurn]
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[int] = ..., previous_response_id: _Optional[str] = ..., response_json: _Optional[bytes] = ..., input_items_json: _Optional[bytes] = ..., expires_at: _Optional[int] = ..., turns: _Optional[_Iterable[_Union[ResponseTurn, _Mapping]]] = ...) -> None: ...

class ResponseTurn(_message.Message):
    __slots__ = ("response_id", "input_items_json", "answer")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_ITEMS_JSON_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    input_items_json: bytes
    answer: _generation_pb2.GenerateResponse
    def __init__(self, response_id: _Optional[str] = ..., input_items_json: _Optional[bytes] = ..., answer: _Optional[_Union[_generation_pb2.GenerateResponse, _Mapping]] = ...) -> None: ...

class NewResponse(_message.Message):
    __slots__ = ("id", "created_at", "previous_response_id", "store", "instructions", "header_json", "input_items_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    HEADER_JSON_FIELD_NUMBER: _ClassVar[int]
    INPUT_ITEMS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: int
    previous_response_id: str
    store: bool
    instructions: str
    header_json: bytes
    input_items_json: bytes
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[int] = ..., previous_response_id: _Optional[str] = ..., store: _Optional[bool] = ..., instructions: _Optional[str] = ..., header_json: _Optional[bytes] = ..., input_items_json: _Optional[bytes] = ...) -> None: ...

class ResponseStored(_message.Message):
    __slots__ = ("id", "created_at", "expires_at", "evicted_count")
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    EVICTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: int
    expires_at: int
    evicted_count: int
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[int] = ..., expires_at: _Optional[int] = ..., evicted_count: _Optional[int] = ...) -> None: ...

class CreateResponseRequest(_message.Message):
    __slots__ = ("generate", "response")
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    generate: _generation_pb2.GenerateRequest
    response: NewResponse
    def __init__(self, generate: _Optional[_Union[_generation_pb2.GenerateRequest, _Mapping]] = ..., response: _Optional[_Union[NewResponse, _Mapping]] = ...) -> None: ...

class CreateResponseResponse(_message.Message):
    __slots__ = ("answer", "stored")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    answer: _generation_pb2.GenerateResponse
    stored: ResponseStored
    def __init__(self, answer: _Optional[_Union[_generation_pb2.GenerateResponse, _Mapping]] = ..., stored: _Optional[_Union[ResponseStored, _Mapping]] = ...) -> None: ...

class CreateResponseStreamRequest(_message.Message):
    __slots__ = ("generate", "response")
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    generate: _generation_pb2.GenerateStreamRequest
    response: NewResponse
    def __init__(self, generate: _Optional[_Union[_generation_pb2.GenerateStreamRequest, _Mapping]] = ..., response: _Optional[_Union[NewResponse, _Mapping]] = ...) -> None: ...

class CreateResponseStreamResponse(_message.Message):
    __slots__ = ("chunk", "stored")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    chunk: _generation_pb2.GenerateStreamResponse
    stored: ResponseStored
    def __init__(self, chunk: _Optional[_Union[_generation_pb2.GenerateStreamResponse, _Mapping]] = ..., stored: _Optional[_Union[ResponseStored, _Mapping]] = ...) -> None: ...

class PutStoredResponseRequest(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: StoredResponse
    def __init__(self, response: _Optional[_Union[StoredResponse, _Mapping]] = ...) -> None: ...

class PutStoredResponseResponse(_message.Message):
    __slots__ = ("id", "created_at", "expires_at", "evicted_count")
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    EVICTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: int
    expires_at: int
    evicted_count: int
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[int] = ..., expires_at: _Optional[int] = ..., evicted_count: _Optional[int] = ...) -> None: ...

class GetStoredResponseRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetStoredResponseResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: StoredResponse
    def __init__(self, response: _Optional[_Union[StoredResponse, _Mapping]] = ...) -> None: ...

class DeleteStoredResponseRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteStoredResponseResponse(_message.Message):
    __slots__ = ("id", "deleted")
    ID_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    id: str
    deleted: bool
    def __init__(self, id: _Optional[str] = ..., deleted: _Optional[bool] = ...) -> None: ...
