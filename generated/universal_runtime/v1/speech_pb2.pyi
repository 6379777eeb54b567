from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AudioFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIO_FORMAT_UNSPECIFIED: _ClassVar[AudioFormat]
    AUDIO_FORMAT_WAV: _ClassVar[AudioFormat]
    AUDIO_FORMAT_MP3: _ClassVar[AudioFormat]
    AUDIO_FORMAT_OPUS: _ClassVar[AudioFormat]
    AUDIO_FORMAT_FLAC: _ClassVar[AudioFormat]
    AUDIO_FORMAT_AAC: _ClassVar[AudioFormat]
    AUDIO_FORMAT_PCM: _ClassVar[AudioFormat]
AUDIO_FORMAT_UNSPECIFIED: AudioFormat
AUDIO_FORMAT_WAV: AudioFormat
AUDIO_FORMAT_MP3: AudioFormat
AUDIO_FORMAT_OPUS: AudioFormat
AUDIO_FORMAT_FLAC: AudioFormat
AUDIO_FORMAT_AAC: AudioFormat
AUDIO_FORMAT_PCM: AudioFormat

class TranscribeOptions(_message.Message):
    __slots__ = ("model", "language", "prompt", "temperature", "translate", "word_timestamps", "keep_alive")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TRANSLATE_FIELD_NUMBER: _ClassVar[int]
    WORD_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    model: str
    language: str
    prompt: str
    temperature: float
    translate: bool
    word_timestamps: bool
    keep_alive: str
    def __init__(self, model: _Optional[str] = ..., language: _Optional[str] = ..., prompt: _Optional[str] = ..., temperature: _Optional[float] = ..., translate: _Optional[bool] = ..., word_timestamps: _Optional[bool] = ..., keep_alive: _Optional[str] = ...) -> None: ...

class TranscribeRequest(_message.Message):
    __slots__ = ("options", "chunk")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    options: TranscribeOptions
    chunk: bytes
    def __init__(self, options: _Optional[_Union[TranscribeOptions, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class TranscriptionInfo(_message.Message):
    __slots__ = ("language", "duration_seconds")
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    language: str
    duration_seconds: float
    def __init__(self, language: _Optional[str] = ..., duration_seconds: _Optional[float] = ...) -> None: ...

class TranscriptWord(_message.Message):
    __slots__ = ("word", "start", "end", "probability")
    WORD_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    word: str
    start: float
    end: float
    probability: float
    def __init__(self, word: _Optional[str] = ..., start: _Optional[float] = ..., end: _Optional[float] = ..., probability: _Optional[float] = ...) -> None: ...

class TranscriptSegment(_message.Message):
    __slots__ = ("id", "start", "end", "text", "words", "avg_logprob", "no_speech_prob")
    ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    AVG_LOGPROB_FIELD_NUMBER: _ClassVar[int]
    NO_SPEECH_PROB_FIELD_NUMBER: _ClassVar[int]
    id: int
    start: float
    end: float
    text: str
    words: _containers.RepeatedCompositeFieldContainer[TranscriptWord]
    avg_logprob: float
    no_speech_prob: float
    def __init__(self, id: _Optional[int] = ..., start: _Optional[float] = ..., end: _Optional[float] = ..., text: _Optional[str] = ..., words: _Optional[_Iterable[_Union[TranscriptWord, _Mapping]]] = ..., avg_logprob: _Optional[float] = ..., no_speech_prob: _Optional[float] = ...) -> None: ...

class TranscribeResponse(_message.Message):
    __slots__ = ("info", "segment")
    INFO_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    info: TranscriptionInfo
    segment: TranscriptSegment
    def __init__(self, info: _Optional[_Union[TranscriptionInfo, _Mapping]] = ..., segment: _Optional[_Union[TranscriptSegment, _Mapping]] = ...) -> None: ...

class SynthesizeSpeechRequest(_message.Message):
    __slots__ = ("model", "input", "voice", "response_format", "speed", "instructions", "keep_alive")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    model: str
    input: str
    voice: str
    response_format: AudioFormat
    speed: float
    instructions: str
    keep_alive: str
    def __init__(self, model: _Optional[str] = ..., input: _Optional[str] = ..., voice: _Optional[str] = ..., response_format: _Optional[_Union[AudioFormat, str]] = ..., speed: _Optional[float] = ..., instructions: _Optional[str] = ..., keep_alive: _Optional[str] = ...) -> None: ...

class SynthesizeSpeechResponse(_message.Message):
    __slots__ = ("audio", "sample_rate", "mime_type")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    audio: bytes
    sample_rate: int
    mime_type: str
    def __init__(self, audio: _Optional[bytes] = ..., sample_rate: _Optional[int] = ..., mime_type: _Optional[str] = ...) -> None: ...

class ListVoicesRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class Voice(_message.Message):
    __slots__ = ("id", "name", "language", "gender")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    GENDER_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    language: str
    gender: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., language: _Optional[str] = ..., gender: _Optional[str] = ...) -> None: ...

class ListVoicesResponse(_message.Message):
    __slots__ = ("voices",)
    VOICES_FIELD_NUMBER: _ClassVar[int]
    voices: _containers.RepeatedCompositeFieldContainer[Voice]
    def __init__(self, voices: _Optional[_Iterable[_Union[Voice, _Mapping]]] = ...) -> None: ...
