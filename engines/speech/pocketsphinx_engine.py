"""Speech to text with CMU PocketSphinx 5: the offline default, US English, on the CPU.

The catalog ``source`` is a folder holding an acoustic model folder, an n-gram language model and
a pronunciation dictionary; the ``pocketsphinx`` wheel ships US English ones
(``pkg://pocketsphinx/model/en-us``: ``en-us/``, ``en-us.lm.bin``, ``cmudict-en-us.dict``). Catalog
options: :class:`~engines.speech.options.PocketSphinxOptions`.

Each window is decoded as one utterance (``full_utt``: cepstral mean normalisation over the whole
window). Its words come from the decoder's segmentation (100 frames a second); fillers (``<s>``,
``<sil>``, ``[NOISE]``) are dropped and a pause of ``segment_pause_s`` between words starts a new
segment. The feature computation is reset before each window, so a window reads the same
whatever was decoded before it.

A noise floor (option ``noise_floor``, default 0.002 of full scale) is added to the samples:
PocketSphinx's features go astray on digitally silent or band-limited audio. On eSpeak NG
sentences (tests/engines/speech/test_pocketsphinx_engine.py) the word error rate is about 0.9
without it and 0.22-0.37 with it; from 0.001 to 0.005 it matters little, at 0.01 it grows again.

Accuracy is that of a 2015 HMM recognizer: fine on clear read speech, poor on noisy or
conversational audio; a Whisper model is the better choice where one is available.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import ModelSpec
from engines.errors import ModelLoadError
from engines.options import parse_options
from engines.reasons import Reason
from engines.registry import register_backend
from engines.sources import file_in_folder, path_size_bytes, resolve_source
from engines.speech.options import PocketSphinxOptions
from engines.speech.speech_to_text import SpeechToTextEngine
from engines.speech.types import SpeechWindow, TranscriptionOptions, TranscriptSegment, TranscriptWord
from engines.types import MemoryUsage

FRAMES_PER_SECOND = 100
"""PocketSphinx's feature frames per second (10 ms shift)."""
_ALTERNATE = re.compile(r"\(\d+\)$")


def is_filler(word: str) -> bool:
    """Whether a segmentation entry is silence or noise, not a word (``<s>``, ``<sil>``, ``[NOISE]``)."""
    return word.startswith(("<", "[", "+")) or not word


def dictionary_word(word: str) -> str:
    """A dictionary entry without its alternate-pronunciation suffix: ``read(2)`` -> ``read``."""
    return _ALTERNATE.sub("", word)


DECODER_EXPANSION = 3
"""Host memory of a loaded decoder over its model files' size on disk: its dictionary and search
structures grow well past their text (92 MB for the packaged 36 MB model, measured with
``bench.memory_estimate``'s method)."""


@dataclass(frozen=True, slots=True)
class _ModelFiles:
    acoustic_model: Path
    language_model: Path
    dictionary: Path


@register_backend
class PocketSphinxEngine(SpeechToTextEngine[PocketSphinxOptions]):
    """PocketSphinx (``pocketsphinx`` 5) on the CPU: English only, no translation; see the module notes."""

    backend = "pocketsphinx"
    languages = frozenset({"en"})
    default_language = "en"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decoder: Any = None

    @classmethod
    def select_device(cls, preference: str) -> str:
        """Always the CPU, whatever the preference: PocketSphinx has no accelerator (never imports torch)."""
        return "cpu"

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The default checks, then that the source folder holds the three model parts.

        Raises:
            ModelLoadError: the source is missing or not a folder of the model's parts
                (MODEL_SOURCE_MISSING, MODEL_SOURCE_INVALID).
            InvalidArgumentError: an invalid option (INVALID_MODEL_OPTION).

        """
        super().check_spec(spec)
        options = parse_options(PocketSphinxOptions, spec.options, backend=cls.backend)
        cls._files(spec.source, options, spec.name)

    @staticmethod
    def _files(source: str, options: PocketSphinxOptions, model: str) -> _ModelFiles:
        """The model's three parts inside the source folder, each checked to exist.

        Raises:
            ModelLoadError: the source is not a local folder, or a part is missing or outside it.

        """
        folder = resolve_source(source).path
        if folder is None or not folder.is_dir():
            raise ModelLoadError(
                f"model {model!r}: pocketsphinx needs a local folder as its source (got {source!r})",
                reason=Reason.MODEL_SOURCE_INVALID,
                model=model,
            )
        files = _ModelFiles(
            acoustic_model=file_in_folder(
                folder, options.acoustic_model, option="acoustic_model", model=model
            ),
            language_model=file_in_folder(
                folder, options.language_model, option="language_model", model=model
            ),
            dictionary=file_in_folder(folder, options.dictionary, option="dictionary", model=model),
        )
        missing = [
            f"{name} {getattr(options, name)!r} ({kind})"
            for name, path, kind, present in (
                ("acoustic_model", files.acoustic_model, "a folder", Path.is_dir),
                ("language_model", files.language_model, "a file", Path.is_file),
                ("dictionary", files.dictionary, "a file", Path.is_file),
            )
            if not present(path)
        ]
        if missing:
            raise ModelLoadError(
                f"model {model!r}: the pocketsphinx source folder {folder} lacks its {', '.join(missing)}",
                reason=Reason.MODEL_SOURCE_MISSING,
                model=model,
            )
        return files

    def recognizer_bytes(self) -> int:
        """:data:`DECODER_EXPANSION` times the three model parts' bytes on disk."""
        files = self._files(self.spec.source, self.options, self.spec.name)
        on_disk = sum(
            path_size_bytes(p) for p in (files.acoustic_model, files.language_model, files.dictionary)
        )
        return DECODER_EXPANSION * on_disk

    def memory_usage(self) -> MemoryUsage:
        """The estimate of the loaded decoder and VAD (PocketSphinx reports no figure of its own)."""
        if self.decoder is None:
            return MemoryUsage()
        return MemoryUsage(ram_bytes=self.loaded_bytes)

    def load_model(self) -> None:
        """Create the decoder (about 0.3 s for the packaged model)."""
        import pocketsphinx

        files = self._files(self.spec.source, self.options, self.spec.name)
        self.decoder = pocketsphinx.Decoder(
            hmm=str(files.acoustic_model),
            lm=str(files.language_model),
            dict=str(files.dictionary),
            loglevel="FATAL",
        )
        self.loaded_bytes = self.estimated_load_bytes()  # the VAD is loaded before the model

    def unload_model(self) -> None:
        """Drop the decoder."""
        self.decoder = None

    def recognize(self, window: SpeechWindow, options: TranscriptionOptions) -> list[TranscriptSegment]:
        """Decode one window as one utterance; segments split at pauses of ``segment_pause_s``.

        Returns:
            Segments with times from the window's start; ``avg_logprob`` is the mean log
            posterior of their words (0 where the decoder gives none); words only when
            ``options.word_timestamps``.

        """
        samples = np.asarray(window.samples, dtype=np.float32)
        if self.options.noise_floor > 0:
            # Seeded by the window, so the same audio always reads the same.
            rng = np.random.default_rng(len(samples))
            samples = samples + rng.normal(0.0, self.options.noise_floor, len(samples)).astype(np.float32)
        pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        decoder = self.decoder
        # The feature computation carries state (its cepstral mean among it) from one utterance to
        # the next: reset it (30 us), so that a window reads the same whatever was decoded before.
        decoder.reinit_feat()
        decoder.start_utt()
        decoder.process_raw(pcm, no_search=False, full_utt=True)
        decoder.end_utt()
        if decoder.hyp() is None:
            return []
        words: list[TranscriptWord] = []
        for entry in decoder.seg():
            if is_filler(entry.word):
                continue
            words.append(
                TranscriptWord(
                    word=dictionary_word(entry.word),
                    start_s=entry.start_frame / FRAMES_PER_SECOND,
                    end_s=(entry.end_frame + 1) / FRAMES_PER_SECOND,
                    probability=self._probability(entry.prob),
                )
            )
        return self._segments(words, options.word_timestamps)

    @staticmethod
    def _probability(posterior: float) -> float:
        """A word's posterior probability (PocketSphinx 5 gives it as a float), clamped to [0, 1].

        1.0 where the decoder computed none (a value that is not a finite number).
        """
        value = float(posterior)
        return min(1.0, max(0.0, value)) if math.isfinite(value) else 1.0

    def _segments(self, words: list[TranscriptWord], with_words: bool) -> list[TranscriptSegment]:
        """Group words into segments at pauses of at least ``segment_pause_s``."""
        groups: list[list[TranscriptWord]] = []
        for word in words:
            if groups and word.start_s - groups[-1][-1].end_s < self.options.segment_pause_s:
                groups[-1].append(word)
            else:
                groups.append([word])
        segments = []
        for group in groups:
            logs = [math.log(w.probability) for w in group if w.probability > 0]
            segments.append(
                TranscriptSegment(
                    id=len(segments),
                    start_s=group[0].start_s,
                    end_s=group[-1].end_s,
                    text=" ".join(w.word for w in group),
                    words=tuple(group) if with_words else (),
                    avg_logprob=sum(logs) / len(logs) if logs else 0.0,
                )
            )
        return segments
