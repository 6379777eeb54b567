"""The bare llama.cpp batched-decode loop, no server: the ceiling of what batching gives here.

B sequences share one llama.cpp context, each with its own sequence id. A wave prefills the B
prompts, then calls ``llama_decode`` once per step with one token for each sequence still
running, and picks each sequence's next token greedily (argmax of its logits row). A sequence
stops after ``max_tokens`` new tokens or at an end-of-generation token, as ours does. The
context is set up as our engine sets up its own (``engines/generation/llama_cpp_load.py``):
one KV stream per sequence (``kv_unified`` off), flash attention off, the same thread count.

Used by :mod:`bench.inprocess` (the ``llama-batched`` worker, the generation bench's ceiling
contender) and :mod:`bench.gguf_quality` (greedy answers, log-likelihood, ceiling per GGUF type).
"""

from __future__ import annotations

import ctypes
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

#: Tokens one ``llama_decode`` call takes at most (prompt chunks are cut to it).
N_BATCH = 512
#: KV cells per sequence are rounded up to a multiple of this.
CELL_ROUNDING = 256
#: Sequences and KV cells per sequence of the ceiling worker: the bench's highest concurrency
#: (16), and room for a chat prompt (about 60 tokens) plus 128 new tokens.
CEILING_SEQUENCES, CEILING_CELLS = 16, 512


@dataclass
class Wave:
    """What one wave of sequences produced.

    Attributes:
        tokens: Each sequence's new token ids, in order (the first one sampled from the prefill).
        ttft_s: Seconds from the wave's start (its first ``llama_decode``) to each sequence's first token.
        latency_s: Seconds from the wave's start to each sequence's last token.
        prefill_s: Seconds of the prefill calls (the first token of every sequence included).
        decode_s: Seconds of the decode steps after the prefill.

    """

    tokens: list[list[int]] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)
    prefill_s: float = 0.0
    decode_s: float = 0.0


class BatchedDecoder:
    """One GGUF model and one multi-sequence llama.cpp context, driven by the bare loop.

    Args:
        model_path: The GGUF file.
        n_threads: Threads of decode and prefill (pass the server's: all usable cores).
        max_sequences: Sequences one wave may hold (the context's ``n_seq_max``).
        cells_per_sequence: KV cells each sequence may use (prompt plus new tokens), rounded up
            to :data:`CELL_ROUNDING`.

    Raises:
        RuntimeError: llama.cpp could not load the model or create the context.

    """

    def __init__(self, model_path: Path, n_threads: int, max_sequences: int, cells_per_sequence: int):
        import llama_cpp
        from llama_cpp._internals import LlamaContext, LlamaModel
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llama_cpp.llama_backend_init()
        # llama.cpp logs through llama-cpp-python's logger; keep its chatter out of the output.
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        self.path = Path(model_path)
        self.max_sequences = max_sequences
        self.model = LlamaModel(
            path_model=str(self.path), params=llama_cpp.llama_model_default_params(), verbose=False
        )
        cells = -(-cells_per_sequence // CELL_ROUNDING) * CELL_ROUNDING
        params = llama_cpp.llama_context_default_params()
        params.n_seq_max = max_sequences
        params.n_ctx = cells * max_sequences
        params.n_batch = params.n_ubatch = N_BATCH
        params.n_threads = params.n_threads_batch = n_threads
        params.kv_unified = False  # a KV stream per sequence, as our engine has
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = LlamaContext(model=self.model, params=params, verbose=False)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.model.vocab))
        self._batch = llama_cpp.llama_batch_init(N_BATCH, 0, 1)
        template = self.model.metadata().get("tokenizer.chat_template")
        self._bos = self._piece(self.model.token_bos())
        self._formatter = Jinja2ChatFormatter(
            template=template, eos_token=self._piece(self.model.token_eos()), bos_token=self._bos
        )

    def close(self) -> None:
        """Free the batch, the context and the model."""
        import llama_cpp

        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        self.ctx.close()
        self.model.close()

    def _piece(self, token: int) -> str:
        import llama_cpp

        buffer = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.model.vocab, token, buffer, 64, 0, True)
        return buffer.raw[: max(0, n)].decode("utf-8", errors="replace")

    def chat_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of ``messages`` rendered with the GGUF's chat template, as our engine renders them."""
        text = self._formatter(messages=messages).prompt
        add_bos = not (self._bos and text.startswith(self._bos))  # no second BOS
        return list(self.model.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True))

    def text_tokens(self, text: str) -> list[int]:
        """Token ids of plain ``text`` after BOS."""
        return list(self.model.tokenize(text.encode("utf-8"), add_bos=True, special=False))

    def detokenize(self, tokens: list[int]) -> str:
        """The text of ``tokens`` (special tokens as nothing)."""
        return self.model.detokenize(tokens, special=False).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends generation (EOS, ``<|im_end|>``...)."""
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self.model.vocab, token))

    def _clear(self) -> None:
        import llama_cpp

        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx.ctx), True)

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """One ``llama_decode`` of ``(token, position, seq_id, wants_logits)`` entries (<= N_BATCH)."""
        import llama_cpp

        batch = self._batch
        for i, (token, position, seq_id, logits) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = position
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_id
            batch.logits[i] = logits
        batch.n_tokens = len(entries)
        status = llama_cpp.llama_decode(self.ctx.ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status}")

    def _logits(self, row: int) -> np.ndarray:
        """Row ``row`` of the last decode call's output logits, float32 of shape (n_vocab,), a view."""
        import llama_cpp

        pointer = llama_cpp.llama_get_logits_ith(self.ctx.ctx, row)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def _prefill(self, prompts: list[list[int]], start: float) -> list[tuple[int, float]]:
        """Decode each prompt in calls of its own (chunks of :data:`N_BATCH`).

        Returns each sequence's greedy first token and the seconds from ``start`` (a
        ``perf_counter`` time) to it. One sequence per call, as our engine prefills: llama.cpp
        splits a batch that mixes KV streams into equal shares per stream, slow for whole prompts.
        """
        first = []
        for seq, prompt in enumerate(prompts):
            for begin in range(0, len(prompt), N_BATCH):
                chunk = prompt[begin : begin + N_BATCH]
                last = begin + len(chunk) == len(prompt)
                self._decode(
                    [(token, begin + i, seq, last and i == len(chunk) - 1) for i, token in enumerate(chunk)]
                )
            token = int(np.argmax(self._logits(len(chunk) - 1)))
            first.append((token, time.perf_counter() - start))
        return first

    def generate(self, prompts: list[list[int]], max_tokens: int) -> Wave:
        """Greedy-decode ``prompts`` together (one sequence each) for up to ``max_tokens`` new tokens.

        Raises:
            ValueError: more prompts than ``max_sequences``.
            RuntimeError: a ``llama_decode`` call failed (e.g. out of KV cells).

        """
        if len(prompts) > self.max_sequences:
            raise ValueError(f"{len(prompts)} prompts for a context of {self.max_sequences} sequences")
        self._clear()
        wave = Wave(tokens=[[] for _ in prompts])
        start = time.perf_counter()
        first = self._prefill(prompts, start)
        now = time.perf_counter()
        wave.prefill_s = now - start
        positions = [len(p) for p in prompts]
        running = []
        for seq, (token, ttft) in enumerate(first):
            wave.tokens[seq].append(token)
            wave.ttft_s.append(ttft)
            wave.latency_s.append(ttft)
            if max_tokens > 1 and not self.is_eog(token):
                running.append(seq)
        step_start = now
        while running:
            self._decode([(wave.tokens[s][-1], positions[s], s, True) for s in running])
            now = time.perf_counter()
            still = []
            for row, seq in enumerate(running):
                token = int(np.argmax(self._logits(row)))
                positions[seq] += 1
                wave.tokens[seq].append(token)
                wave.latency_s[seq] = now - start
                if len(wave.tokens[seq]) < max_tokens and not self.is_eog(token):
                    still.append(seq)
            running = still
        wave.decode_s = time.perf_counter() - step_start
        return wave

    def token_logprobs(self, tokens: list[int]) -> list[float]:
        """Log-probability of each of ``tokens[1:]`` given the tokens before it (one sequence).

        Natural log; the text must fit the context of one sequence.
        """
        self._clear()
        out: list[float] = []
        for start in range(0, len(tokens), N_BATCH):
            chunk = tokens[start : start + N_BATCH]
            self._decode([(token, start + i, 0, True) for i, token in enumerate(chunk)])
            for i in range(len(chunk)):
                target = start + i + 1
                if target >= len(tokens):
                    break
                row = self._logits(i).astype(np.float64)
                peak = row.max()
                out.append(float(row[tokens[target]] - peak - np.log(np.exp(row - peak).sum())))
        return out


class WaveGenerator(Protocol):
    """Driven by :func:`run_waves`: :class:`BatchedDecoder`, :class:`bench.hf_batched.HFBatchedGenerator`."""

    def chat_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """Prompt token ids of chat ``messages``."""
        ...

    def generate(self, prompts: list[list[int]], max_tokens: int) -> Wave:
        """Greedy-generate ``prompts`` together, up to ``max_tokens`` new tokens each."""
        ...


def run_waves(
    decoder: WaveGenerator, prompts: list[list[int]], concurrency: int, max_tokens: int
) -> dict[str, Any]:
    """Generate ``prompts`` in waves of ``concurrency``; a load-client-shaped result.

    ``wall_s`` is the time of the waves' generation (for the llama.cpp loop: from each wave's
    first ``llama_decode``, its prefill, to its last step), summed; ``decode_s`` the part after
    the prefills, and ``decode_tokens`` the tokens those steps produced. Each record has
    ``tokens`` (new tokens), ``ttft_s`` and ``latency_s`` from its wave's start.
    """
    records: list[dict[str, Any]] = []
    wall = decode = 0.0
    decode_tokens = 0
    for start in range(0, len(prompts), concurrency):
        wave = decoder.generate(prompts[start : start + concurrency], max_tokens)
        wall += wave.prefill_s + wave.decode_s
        decode += wave.decode_s
        decode_tokens += sum(len(t) - 1 for t in wave.tokens)
        records += [
            {"ok": True, "tokens": len(tokens), "ttft_s": ttft, "latency_s": latency}
            for tokens, ttft, latency in zip(wave.tokens, wave.ttft_s, wave.latency_s, strict=True)
        ]
    return {
        "mode": "batched",
        "concurrency": concurrency,
        "wall_s": wall,
        "decode_s": decode,
        "decode_tokens": decode_tokens,
        "records": records,
    }
