"""Speech to text with OpenAI Whisper checkpoints (Hugging Face format) through transformers.

The catalog ``source`` is a local folder or a hub id of a Whisper checkpoint with its processor
(``openai/whisper-small``, a fine-tune, a ``.en`` English-only model); no weights ship with the
server. Catalog options: :class:`~engines.speech.options.WhisperOptions`.

Each window (at most 30 s, Whisper's input span; the feature extractor pads it to 30 s) is one
``generate`` call with timestamps on; the generated ``<|t|>`` tokens cut its text into segments
(:func:`timestamp_segments`). Languages are those of the checkpoint's generation config
(``lang_to_id``); a call without one detects it from the first window. Translation into English
is offered by multilingual checkpoints.

Bounds: generation is greedy (or sampled at the request's temperature) and stops after
``max_new_tokens`` tokens per window (at most 444, what the decoder's 448 positions leave after its
prompt, and less by the request prompt's tokens, of which at most ``max_prompt_tokens`` are kept).

Segments carry segment-level times only: ``words`` stay empty even when word timestamps are asked
for (Whisper's word times need cross-attention alignment, which the checkpoints' ``alignment_heads``
make possible but this backend does not run), and ``avg_logprob``/``no_speech_prob`` are 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engines.device import torch_dtype_for, torch_module_memory
from engines.errors import InvalidArgumentError
from engines.hf_construction import hf_construction
from engines.memory_estimate import dtype_itemsize, weight_bytes
from engines.registry import register_backend
from engines.sources import resolve_source
from engines.speech.options import WhisperOptions
from engines.speech.speech_to_text import SpeechToTextEngine
from engines.speech.types import SpeechWindow, TranscriptionOptions, TranscriptionTask, TranscriptSegment
from engines.types import MemoryUsage

TIME_PRECISION = 0.02
"""Seconds between two of Whisper's timestamp tokens."""
MAX_PROMPT_CHARS = 4000
"""Characters at the end of a request's prompt that are tokenized (223 tokens are rarely 1,500)."""
INIT_TOKENS = 4
"""Decoder positions its start sequence takes (start of transcript, language, task, timestamps)."""


def timestamp_segments(
    token_ids: list[int], timestamp_begin: int, first_special: int, duration_s: float
) -> list[tuple[float, float, list[int]]]:
    """Cut Whisper's generated tokens into ``(start_s, end_s, text token ids)`` at its timestamp tokens.

    Whisper writes ``<|t0|> text <|t1|><|t1|> text <|t2|>``: a timestamp opens a segment, the next
    one after text closes it. Text after the last timestamp (generation cut at its bound, or a
    model that wrote none) ends at ``duration_s``. Special tokens (ids from ``first_special`` up
    to ``timestamp_begin``, the end of text) carry no text and are dropped.

    Args:
        token_ids: the generated ids, without the decoder's start sequence.
        timestamp_begin: id of ``<|0.00|>``; larger ids are later times.
        first_special: id of the first special token (``<|endoftext|>``).
        duration_s: the window's length, seconds; every time is clamped into [0, duration_s].

    Returns:
        Segments in order, each with at least one text token; times in seconds from the window's
        start, ``start_s <= end_s``.

    """
    segments: list[tuple[float, float, list[int]]] = []
    start: float | None = None
    text: list[int] = []
    for token in token_ids:
        if token >= timestamp_begin:
            time = min(duration_s, (token - timestamp_begin) * TIME_PRECISION)
            if text:
                begin = 0.0 if start is None else start
                segments.append((begin, max(begin, time), text))
                text, start = [], None
            else:
                start = time
        elif token < first_special:
            text.append(token)
    if text:
        begin = 0.0 if start is None else start
        segments.append((begin, max(begin, duration_s), text))
    return segments


@register_backend
class WhisperEngine(SpeechToTextEngine[WhisperOptions]):
    """A Whisper checkpoint on torch (CPU or GPU).

    Any language of the checkpoint, translation when it is multilingual; see the module notes for
    the bounds and what segments carry.
    """

    backend = "whisper"
    runs_torch = True
    detects_language = True
    can_translate = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.model: Any = None
        self.processor: Any = None

    def recognizer_bytes(self) -> int:
        """The weights at the compute dtype, from a local folder's safetensors headers; else unknown (0)."""
        resolved = resolve_source(self.spec.source)
        if resolved.path is None or not resolved.path.is_dir():
            return 0
        return weight_bytes(resolved.path, dtype_itemsize(self.device, self.options.dtype))

    def memory_usage(self) -> MemoryUsage:
        """Parameter and buffer bytes of the model by device."""
        if self.model is None:
            return MemoryUsage()
        ram, vram = torch_module_memory(self.model)
        return MemoryUsage(ram_bytes=ram, vram_bytes=vram)

    def load_model(self) -> None:
        """Load the processor and the model; read the languages and tasks from its generation config.

        Raises:
            Exception: whatever transformers raises for a missing or broken checkpoint.

        """
        from transformers import WhisperForConditionalGeneration, WhisperProcessor

        resolved = resolve_source(self.spec.source)
        local = resolved.path is not None
        processor = WhisperProcessor.from_pretrained(resolved.location, local_files_only=local)
        with hf_construction():  # one build at a time: engines/hf_construction.py
            model = WhisperForConditionalGeneration.from_pretrained(
                resolved.location,
                dtype=torch_dtype_for(self.device, self.options.dtype),
                local_files_only=local,
            )
        self.model = model.to(self.device).eval()
        self.processor = processor
        generation = model.generation_config
        lang_to_id = dict(getattr(generation, "lang_to_id", None) or {})
        multilingual = bool(getattr(generation, "is_multilingual", False)) and bool(lang_to_id)
        # Instance attributes over the class's: what this checkpoint hears and does.
        self.language_ids = {token.strip("<|>"): int(i) for token, i in lang_to_id.items()}
        self.languages = frozenset(self.language_ids) if multilingual else frozenset({"en"})
        self.detects_language = multilingual
        self.can_translate = multilingual and "translate" in (getattr(generation, "task_to_id", None) or {})
        tokenizer = processor.tokenizer
        self.first_special = int(tokenizer.convert_tokens_to_ids("<|endoftext|>"))
        self.timestamp_begin = int(generation.no_timestamps_token_id) + 1
        self.positions = int(model.config.max_target_positions)

    def unload_model(self) -> None:
        """Drop the model and the processor."""
        self.model = None
        self.processor = None

    def _features(self, samples: np.ndarray) -> Any:
        """Log-mel features of up to 30 s of samples, padded to 30 s, on the model's device and dtype."""
        features = self.processor.feature_extractor(
            samples, sampling_rate=self.sample_rate, return_tensors="pt"
        ).input_features
        return features.to(self.device, next(self.model.parameters()).dtype)

    def detect_language(self, samples: np.ndarray) -> str:
        """The language Whisper hears in ``samples`` (one decoder step), as an ISO 639-1 code."""
        import torch

        with torch.inference_mode():
            token = int(self.model.detect_language(self._features(samples))[0])
        by_id = {i: code for code, i in self.language_ids.items()}
        return by_id.get(token, self.default_language)

    def _prompt_ids(self, prompt: str) -> Any:
        """The prompt's ids: ``<|startofprev|>``, then its last ``max_prompt_tokens`` tokens; or None."""
        if not prompt.strip() or self.options.max_prompt_tokens == 0:
            return None
        # Only the prompt's end is kept: tokenize no more of it than that can need.
        text = prompt[-MAX_PROMPT_CHARS:]
        try:
            ids = self.processor.get_prompt_ids(text, return_tensors="pt")
        except ValueError as exc:  # the text holds a special token (<|endoftext|>...)
            raise InvalidArgumentError(f"the prompt cannot be used: {exc}", field="prompt") from None
        if len(ids) > self.options.max_prompt_tokens + 1:
            ids = ids.new_tensor([int(ids[0]), *ids[-self.options.max_prompt_tokens :].tolist()])
        return ids.to(self.device)

    def recognize(self, window: SpeechWindow, options: TranscriptionOptions) -> list[TranscriptSegment]:
        """One ``generate`` call with timestamps on the window; segments at its timestamp tokens.

        Raises:
            InvalidArgumentError: a prompt holding one of Whisper's special tokens.

        """
        import torch

        samples = np.asarray(window.samples, dtype=np.float32)
        duration = len(samples) / self.sample_rate
        prompt_ids = self._prompt_ids(options.prompt)
        room = self.positions - INIT_TOKENS - (0 if prompt_ids is None else len(prompt_ids))
        max_new_tokens = max(1, min(self.options.max_new_tokens, room))
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": float(options.temperature)}
            if options.temperature > 0
            else {"do_sample": False}
        )
        task = "translate" if options.task == TranscriptionTask.TRANSLATE else "transcribe"
        with torch.inference_mode():
            generated = self.model.generate(
                self._features(samples),
                return_timestamps=True,
                language=options.language if self.detects_language else None,
                task=task if self.detects_language else None,
                prompt_ids=prompt_ids,
                max_new_tokens=max_new_tokens,
                # One decoder pass per window: without it, generate seeks on past the last
                # timestamp and decodes again, unbounded by max_new_tokens.
                force_unique_generate_call=True,
                **sampling,
            )
        ids = generated["sequences"] if isinstance(generated, dict) else generated
        token_ids = [int(t) for t in ids[0].tolist()]
        # One generate call hands back its decoder input (the prompt, then the start sequence).
        start_id = int(self.model.generation_config.decoder_start_token_id)
        if start_id in token_ids:
            token_ids = token_ids[token_ids.index(start_id) + 1 :]
        tokenizer = self.processor.tokenizer
        segments = []
        for start_s, end_s, text_ids in timestamp_segments(
            token_ids, self.timestamp_begin, self.first_special, duration
        ):
            text = tokenizer.decode(text_ids, skip_special_tokens=True).strip()
            if text:
                segments.append(TranscriptSegment(id=len(segments), start_s=start_s, end_s=end_s, text=text))
        return segments
