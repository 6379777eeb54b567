"""Text to speech with eSpeak NG (backend ``espeak``): the offline default voice model.

The catalog ``source`` is an ``espeak-ng-data`` folder, normally the one the ``espeakng-loader``
wheel ships: ``pkg://espeakng_loader/espeak-ng-data``. Speech is float32 mono at 22,050 Hz,
through the ctypes binding :mod:`engines.speech.espeak`. Catalog options: :class:`EspeakOptions`.

eSpeak NG keeps one synthesizer per process, with global state that is not thread-safe, and one
data folder per process: every call runs on the model's one lane thread (the base class runs
:meth:`~EspeakEngine.speak` and the load there), and the binding also holds a lock.

Voices: eSpeak NG's own, one per language or dialect (``en-us``, ``en-gb``, ``de``, ``fr-fr``,
``cmn``...; a bare language such as ``fr`` also finds its voice), the configured default first;
then OpenAI's voice names, so that OpenAI SDK calls with ``voice="alloy"`` work. Each is an
English eSpeak voice with one of its variants (:data:`OPENAI_VOICES`).
"""

from __future__ import annotations

import importlib.util
from typing import Annotated

import numpy as np
from pydantic import Field

from engines.base import ModelSpec
from engines.errors import FailedPreconditionError, InvalidArgumentError
from engines.options import OVERRIDE, EngineOptions, NonEmptyStr
from engines.reasons import Reason
from engines.registry import register_backend
from engines.sources import resolve_source
from engines.speech.text_to_speech import TextToSpeechEngine
from engines.speech.types import Voice
from engines.types import MemoryUsage

#: Speaking rates eSpeak NG accepts, words per minute (``espeakRATE_MINIMUM``/``MAXIMUM``).
MIN_WORDS_PER_MINUTE = 80
MAX_WORDS_PER_MINUTE = 450
#: Host memory of a loaded eSpeak NG and a call's buffers: phoneme tables, one language's
#: dictionary, the encoder (about 10 MB over a load and a 400-character mp3 request, measured with
#: ``bench.memory_estimate``'s method; each other language spoken adds its dictionary).
ESPEAK_LOAD_BYTES = 11 * 1024 * 1024

#: OpenAI's voice names → (eSpeak voice id, variant, gender). The variants (``voices/!v`` in the
#: data) give distinct pitches; ``fable`` is British as OpenAI's is.
OPENAI_VOICES: dict[str, tuple[str, str, str]] = {
    "alloy": ("en-us", "", "male"),
    "ash": ("en-us", "m2", "male"),
    "ballad": ("en-gb", "m3", "male"),
    "cedar": ("en-us", "m5", "male"),
    "coral": ("en-us", "f2", "female"),
    "echo": ("en-us", "m3", "male"),
    "fable": ("en-gb", "", "male"),
    "marin": ("en-us", "f5", "female"),
    "nova": ("en-us", "f3", "female"),
    "onyx": ("en-us", "m1", "male"),
    "sage": ("en-us", "f1", "female"),
    "shimmer": ("en-us", "f4", "female"),
    "verse": ("en-us", "m4", "male"),
}


class EspeakOptions(EngineOptions):
    """Options of the ``espeak`` backend (eSpeak NG)."""

    words_per_minute: Annotated[int, Field(ge=MIN_WORDS_PER_MINUTE, le=MAX_WORDS_PER_MINUTE), OVERRIDE] = 175
    """Speaking rate at speed 1, words per minute (80-450); a request's speed multiplies it, within 80-450."""
    default_voice: NonEmptyStr = "en-us"
    """Voice id spoken when a request names none (listed first), e.g. en-us, en-gb, de, or alloy."""


@register_backend
class EspeakEngine(TextToSpeechEngine[EspeakOptions]):
    """eSpeak NG (formant synthesis, ~100 languages; small and fast, robotic)."""

    backend = "espeak"

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The base checks, and the ``espeakng-loader`` package (the library) is installed; imports nothing.

        Raises:
            FailedPreconditionError: ``espeakng-loader`` is missing (reason RUNTIME_NOT_INSTALLED).
            ModelLoadError, InvalidArgumentError: see :meth:`Engine.check_spec`.

        """
        if importlib.util.find_spec("espeakng_loader") is None:
            raise FailedPreconditionError(
                "the espeak backend needs the Python package espeakng-loader: "
                "pip install 'universal-runtime[models]'",
                reason=Reason.RUNTIME_NOT_INSTALLED,
                runtime="espeak",
            )
        super().check_spec(spec)

    def load_model(self) -> None:
        """Initialize eSpeak NG with the source's data folder (blocking, on the lane).

        Raises:
            ModelLoadError: the source is missing (see :func:`engines.sources.resolve_source`).
            ValueError: this process's eSpeak NG already uses another data folder.
            RuntimeError: the library failed to initialize.

        """
        from engines.speech import espeak

        path = resolve_source(self.spec.source).path
        self.sample_rate = espeak.initialize(path)
        # What the binding's speak() is given for each voice id: the voice's name and variant.
        # eSpeak NG's espeak_SetVoiceByName matches names and voice file names, not every
        # language tag the binding lists as an id (en-gb and fr-fr are files gmw/en and roa/fr).
        self._espeak_names: dict[str, str] = {}

    def unload(self) -> None:
        """Nothing to free: eSpeak NG stays initialized for the process.

        It cannot be initialized again with another folder, and its tables are small.
        """

    def memory_usage(self) -> MemoryUsage:
        """Unknown (the library's own allocations)."""
        return MemoryUsage()

    def estimated_load_bytes(self) -> int:
        """:data:`ESPEAK_LOAD_BYTES`: a few tens of MB of host RAM."""
        return ESPEAK_LOAD_BYTES

    def list_voices(self) -> tuple[Voice, ...]:
        """The voices of eSpeak NG with the default first, then OpenAI's names (blocking, on the lane).

        Raises:
            InvalidArgumentError: ``default_voice`` names no voice (reason INVALID_MODEL_OPTION).

        """
        from engines.speech import espeak

        native: dict[str, Voice] = {}
        for voice in espeak.list_voices():
            if voice.id and voice.id.lower() not in native:  # the first of a duplicated id wins
                native[voice.id.lower()] = voice
                self._espeak_names[voice.id.lower()] = voice.name or voice.id
        voices = list(native.values())
        for name, (base, variant, gender) in OPENAI_VOICES.items():
            speaker = native.get(base)
            if speaker is None:
                continue
            voices.append(
                Voice(id=name, name=f"{name} ({speaker.name})", language=speaker.language, gender=gender)
            )
            self._espeak_names[name] = self._espeak_names[base] + (f"+{variant}" if variant else "")
        default = self.options.default_voice.lower()
        first = next((v for v in voices if v.id.lower() == default), None)
        if first is None:
            raise InvalidArgumentError(
                f"espeak has no voice {self.options.default_voice!r} (option default_voice); "
                f"e.g. en-us, en-gb, de, fr-fr, alloy",
                reason=Reason.INVALID_MODEL_OPTION,
                option="default_voice",
            )
        return (first, *(v for v in voices if v is not first))

    def speak(self, text: str, voice: Voice, speed: float) -> np.ndarray:
        """One sentence's speech at ``words_per_minute * speed``, clamped to 80-450 (blocking, lane).

        Returns:
            float32 mono samples at :attr:`sample_rate`, shape (n,).

        Raises:
            ValueError: eSpeak NG does not know the voice.
            RuntimeError: eSpeak NG failed.

        """
        from engines.speech import espeak

        rate = round(self.options.words_per_minute * speed)
        rate = min(max(rate, MIN_WORDS_PER_MINUTE), MAX_WORDS_PER_MINUTE)
        name = self._espeak_names.get(voice.id.lower(), voice.id)
        audio = espeak.speak(text, voice=name, words_per_minute=rate)
        return np.asarray(audio.samples, dtype=np.float32)
