from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoredResponse(_message.Message):
    __slots__ = ("id", "created_at", "previous_response_id", "response_json", "input_items_json", "expires_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_JSON_FIELD_NUMBER: _ClassVar[int]
    INPUT_ITEMS_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    created_at: int
    previous_response_id: str
    response_json: bytes
    input_items_json: bytes
    expires_at: int
    def __init__(self, id: _Optional[str] = ..., created_at: _Optional[int] = ..., previous_response_id: _Optional[str] = ..., response_json: _Optional[bytes] = ..., input_items_json: _Optional[bytes] = ..., expires_at: _Optional[int] = ...) -> None: ...

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
