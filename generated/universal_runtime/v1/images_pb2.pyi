from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GenerateImageRequest(_message.Message):
    __slots__ = ("model", "prompt", "negative_prompt", "n", "width", "height", "steps", "guidance_scale", "seed", "keep_alive")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_PROMPT_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    GUIDANCE_SCALE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    model: str
    prompt: str
    negative_prompt: str
    n: int
    width: int
    height: int
    steps: int
    guidance_scale: float
    seed: int
    keep_alive: str
    def __init__(self, model: _Optional[str] = ..., prompt: _Optional[str] = ..., negative_prompt: _Optional[str] = ..., n: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., steps: _Optional[int] = ..., guidance_scale: _Optional[float] = ..., seed: _Optional[int] = ..., keep_alive: _Optional[str] = ...) -> None: ...

class ImageGenerationProgress(_message.Message):
    __slots__ = ("step", "steps", "image_index")
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    step: int
    steps: int
    image_index: int
    def __init__(self, step: _Optional[int] = ..., steps: _Optional[int] = ..., image_index: _Optional[int] = ...) -> None: ...

class GeneratedImage(_message.Message):
    __slots__ = ("png", "seed", "width", "height")
    PNG_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    png: bytes
    seed: int
    width: int
    height: int
    def __init__(self, png: _Optional[bytes] = ..., seed: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ...) -> None: ...

class GenerateImageResponse(_message.Message):
    __slots__ = ("progress", "image")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    progress: ImageGenerationProgress
    image: GeneratedImage
    def __init__(self, progress: _Optional[_Union[ImageGenerationProgress, _Mapping]] = ..., image: _Optional[_Union[GeneratedImage, _Mapping]] = ...) -> None: ...
