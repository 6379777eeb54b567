"""eSpeak NG through its C API (``speak_lib.h``), from the library the ``espeakng-loader`` wheel bundles.

eSpeak NG keeps one synthesizer per process (global state, not thread-safe): :func:`initialize`
runs once per process with one data folder, and every call holds :data:`_LOCK`. The engine
also runs them all on its one lane thread.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import numpy as np

from engines.speech.types import Audio, Voice

# speak_lib.h: espeak_AUDIO_OUTPUT, espeak_POSITION_TYPE, flags and espeak_PARAMETER values.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_RATE = 1
_EE_OK = 0
#: Speaking rates eSpeak NG accepts, words per minute (``espeakRATE_MINIMUM``/``MAXIMUM``).
MIN_WORDS_PER_MINUTE = 80
MAX_WORDS_PER_MINUTE = 450
_GENDERS = {1: "male", 2: "female"}

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class _EspeakVoice(ctypes.Structure):
    """``espeak_VOICE`` of ``speak_lib.h``."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_void_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


class _Synthesizer:
    """The process's one initialized eSpeak NG (library handle, data folder, sample rate)."""

    def __init__(self, data_path: str) -> None:
        import espeakng_loader

        self.data_path = data_path
        self.lib = ctypes.CDLL(espeakng_loader.get_library_path())
        self.lib.espeak_Initialize.restype = ctypes.c_int
        self.lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.lib.espeak_Synth.restype = ctypes.c_int
        self.lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        self.lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self.lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_EspeakVoice))
        self.lib.espeak_ListVoices.argtypes = [ctypes.c_void_p]
        self.lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
        rate = self.lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path.encode(), 0)
        if rate <= 0:
            raise RuntimeError(f"eSpeak NG failed to initialize with data folder {data_path}")
        self.sample_rate = rate
        self._pieces: list[np.ndarray] = []
        # Kept referenced: the library calls it for as long as the process lives.
        self._callback = _CALLBACK(self._collect)
        self.lib.espeak_SetSynthCallback(self._callback)

    def _collect(self, wav: ctypes.POINTER(ctypes.c_short), count: int, events: int) -> int:  # type: ignore[valid-type]
        if wav and count > 0:
            self._pieces.append(np.ctypeslib.as_array(wav, shape=(count,)).astype(np.float32) / 32768.0)
        return 0  # go on

    def speak(self, text: str, voice: str, words_per_minute: int) -> np.ndarray:
        if self.lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
            raise ValueError(f"eSpeak NG has no voice {voice!r}")
        self.lib.espeak_SetParameter(_RATE, words_per_minute, 0)
        data = text.encode() + b"\0"
        self._pieces = []
        status = self.lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        if status != _EE_OK:
            raise RuntimeError(f"eSpeak NG failed to synthesize (error {status})")
        pieces, self._pieces = self._pieces, []
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)

    def voices(self) -> list[Voice]:
        found: dict[str, Voice] = {}
        table = self.lib.espeak_ListVoices(None)
        index = 0
        while table[index]:
            entry = table[index].contents
            index += 1
            language = _first_language(entry.languages)
            identifier = (entry.identifier or b"").decode()
            voice_id = language or identifier
            # A voice whose language has no dictionary in the data folder speaks letters, not words.
            dictionary = Path(self.data_path) / f"{voice_id.split('-')[0]}_dict"
            if voice_id in found or not dictionary.is_file():
                continue
            found[voice_id] = Voice(
                id=voice_id,
                name=(entry.name or b"").decode(),
                language=language,
                gender=_GENDERS.get(entry.gender, ""),
            )
        return list(found.values())


def _first_language(pointer: int | None) -> str:
    """The first language of an ``espeak_VOICE.languages`` list (a priority byte, then the name)."""
    if not pointer:
        return ""
    return ctypes.string_at(pointer + 1).decode()


_LOCK = threading.Lock()
_synthesizer: _Synthesizer | None = None


def initialize(data_path: str | Path | None = None) -> int:
    """Initialize eSpeak NG once for this process with ``data_path``; return its sample rate, Hz.

    ``data_path`` is an ``espeak-ng-data`` folder (default: the one ``espeakng-loader`` ships).

    Raises:
        ValueError: eSpeak NG was already initialized with another folder (it keeps one per process).
        RuntimeError: the library failed to initialize.

    """
    global _synthesizer
    if data_path is None:
        import espeakng_loader

        data_path = espeakng_loader.get_data_path()
    path = str(Path(data_path).resolve())
    with _LOCK:
        if _synthesizer is None:
            _synthesizer = _Synthesizer(path)
        elif _synthesizer.data_path != path:
            raise ValueError(
                f"eSpeak NG is initialized with {_synthesizer.data_path}; a process keeps one data folder"
            )
        return _synthesizer.sample_rate


def speak(text: str, voice: str = "en-us", words_per_minute: int = 175) -> Audio:
    """The speech of ``text`` (plain text, never SSML) as float32 mono samples at eSpeak NG's rate.

    Blocking, and as long as the text: callers bound the text (a sentence at a time).

    Args:
        text: what to say.
        voice: a voice id of :func:`list_voices` (a language such as ``en-us``).
        words_per_minute: speaking rate, clamped to [80, 450].

    Raises:
        ValueError: an unknown voice.
        RuntimeError: eSpeak NG failed.

    """
    rate = initialize() if _synthesizer is None else _synthesizer.sample_rate
    assert _synthesizer is not None
    words_per_minute = min(max(int(words_per_minute), MIN_WORDS_PER_MINUTE), MAX_WORDS_PER_MINUTE)
    with _LOCK:
        samples = _synthesizer.speak(text, voice, words_per_minute)
    return Audio(samples=samples, sample_rate=rate)


def list_voices() -> list[Voice]:
    """Every voice of the data folder, as eSpeak NG lists them (one per language or dialect)."""
    if _synthesizer is None:
        initialize()
    assert _synthesizer is not None
    with _LOCK:
        return _synthesizer.voices()
