"""Catalog options of the speech-to-text backends (``pocketsphinx``, ``whisper``), typed.

A light module (pydantic only): the catalog check and the catalog's JSON Schema import it without
ONNX Runtime, PocketSphinx or torch.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from engines.options import (
    OVERRIDE,
    AtLeastOne,
    EngineOptions,
    Fraction,
    NonEmptyStr,
    TorchDtypeOptions,
    TorchEngineOptions,
)

MAX_WINDOW_S = 30.0
"""Longest window of audio one recognizer call reads, seconds (Whisper's input span)."""
WHISPER_MAX_NEW_TOKENS = 444
"""Most tokens Whisper generates for one window: its 448 decoder positions less the 4 of its prompt."""


class SpeechToTextOptions(EngineOptions):
    """Options every speech-to-text backend accepts: how audio is cut into windows."""

    vad: Annotated[bool, OVERRIDE] = True
    """Cut the audio into windows at the speech that Silero VAD finds (silence is skipped); false: fixed
    windows of max_window_s over the whole audio."""
    vad_threshold: Annotated[Fraction, OVERRIDE] = 0.5
    """Silero VAD speech probability (0-1) from which a 32 ms frame counts as speech."""
    min_silence_s: Annotated[float, Field(ge=0, le=10), OVERRIDE] = 0.3
    """Seconds of silence that end a stretch of speech; shorter pauses stay inside it."""
    speech_pad_s: Annotated[float, Field(ge=0, le=2), OVERRIDE] = 0.1
    """Seconds of audio kept before and after each stretch of speech."""
    max_window_s: Annotated[float, Field(ge=1, le=MAX_WINDOW_S), OVERRIDE] = MAX_WINDOW_S
    """Longest window of audio one recognizer call reads, seconds (1-30)."""


class PocketSphinxOptions(SpeechToTextOptions):
    """Options of the ``pocketsphinx`` backend (CMU PocketSphinx 5, CPU)."""

    acoustic_model: NonEmptyStr = "en-us"
    """Folder of the acoustic model inside the source folder."""
    language_model: NonEmptyStr = "en-us.lm.bin"
    """N-gram language model file (ARPA or binary) inside the source folder."""
    dictionary: NonEmptyStr = "cmudict-en-us.dict"
    """Pronunciation dictionary file inside the source folder."""
    segment_pause_s: Annotated[float, Field(ge=0.1, le=10), OVERRIDE] = 0.5
    """Pause between two words, seconds, that starts a new transcript segment."""
    noise_floor: Annotated[float, Field(ge=0, le=0.05), OVERRIDE] = 0.002
    """Standard deviation of the Gaussian noise added to the samples (full scale 1; 0.002 is -54 dBFS); 0:
    none. PocketSphinx's features go astray on digitally silent or band-limited audio (synthesized or
    padded speech); a microphone's noise floor keeps them in range."""


class WhisperOptions(SpeechToTextOptions, TorchEngineOptions, TorchDtypeOptions):
    """Options of the ``whisper`` backend (Hugging Face Whisper checkpoints through transformers)."""

    max_new_tokens: Annotated[AtLeastOne, Field(le=WHISPER_MAX_NEW_TOKENS), OVERRIDE] = WHISPER_MAX_NEW_TOKENS
    """Most tokens generated for one window of up to 30 s (at most 444, Whisper's decoder positions less
    its prompt)."""
    max_prompt_tokens: Annotated[int, Field(ge=0, le=223), OVERRIDE] = 223
    """Most tokens of a request's prompt passed to the decoder (its last ones); 0: prompts are ignored."""
