"""Document QA, fields and classes with Donut (Kim et al. 2022, arXiv:2111.15664).

Donut is the "OCR-free Document Understanding Transformer": it
reads the page image only (a Swin encoder) and writes its answer as a token sequence (a BART
decoder) that the processor's ``token2json`` turns into JSON: ``<s_answer>42</s_answer>`` ->
``{"answer": "42"}``. Loaded with ``VisionEncoderDecoderModel`` and ``DonutProcessor`` from
transformers (no remote code). The task is chosen by the decoder prompt, one per task (catalog
option ``task_prompts``; defaults after the fine-tuned checkpoints ``naver-clova-ix/
donut-base-finetuned-docvqa``, ``-cord-v2`` and ``-rvlcdip``):

* ``document_qa``: ``<s_docvqa><s_question>{question}</s_question><s_answer>``; the answer is the
  ``answer`` key.
* ``extract_fields``: ``<s_cord-v2>``; fields are the JSON flattened to paths such as
  ``menu[0].price``.
* ``classify_document``: ``<s_rvlcdip>``; the ``class`` key. When the class is a categorical
  token (``<letter/>``, as in the RVL-CDIP checkpoint), every class is scored from one decoder
  step after ``<s_class>``, so the scores are a distribution over all classes; otherwise the
  generated class alone is returned, scored by the generated tokens' mean probability.

Donut gives no boxes: citations are found by matching the values against the page's OCR lines
(:func:`~engines.documents.citations.find_citations`).

Bounds: decoding is greedy and stops after ``max_new_tokens`` tokens (catalog option, default
128, at most :data:`~engines.documents.options.MAX_NEW_TOKENS_CAP` and at most what the decoder's
positions leave after the prompt); questions are at most ``max_question_chars`` characters
(default 1,000) and must leave ``max_new_tokens`` positions free.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.device import torch_dtype_for
from engines.documents.citations import find_citations
from engines.documents.model_engine import DocumentModelEngine, softmax
from engines.documents.options import DEFAULT_PROMPTS as DEFAULT_TASK_PROMPTS
from engines.documents.options import DonutOptions
from engines.documents.types import DocumentAnswer, DocumentField, DocumentLabel
from engines.errors import InputTooLongError
from engines.hf_construction import hf_construction
from engines.ocr.types import OcrPage
from engines.registry import register_backend
from engines.sources import resolve_source
from engines.types import Task

if TYPE_CHECKING:
    from PIL.Image import Image

DEFAULT_PROMPTS: dict[Task, str] = {Task(name): prompt for name, prompt in DEFAULT_TASK_PROMPTS.items()}
MAX_FIELDS = 1_000
"""Most fields returned from one page's JSON (bounded anyway by the generated tokens)."""

_TAG = re.compile(r"</?s_[^<>]*>|<[^<>/]+/>")
_CATEGORY = re.compile(r"<([^<>/\s]+)/>")


# -- post-processing (pure) ----------------------------------------------------------------


def clean_sequence(text: str, special: tuple[str, ...]) -> str:
    """A decoded Donut sequence ready for ``token2json``: special tokens and the task tag removed.

    Args:
        text: the decoder's whole sequence (prompt and generated tokens) decoded with special
            tokens kept, e.g. ``<s><s_docvqa><s_question>q</s_question><s_answer>a</s_answer></s>``.
        special: token strings to drop (eos, pad, bos).

    Returns:
        The text after the first ``<s_...>`` task tag (which ``token2json`` would take for a field
        with no end), as the Donut model card does.

    """
    for token in special:
        if token:
            text = text.replace(token, "")
    return re.sub(r"^\s*<s_[^<>]*>", "", text, count=1).strip()


def answer_from(parsed: dict[str, Any], sequence: str, key: str = "answer") -> str:
    """The answer of a parsed DocVQA sequence.

    ``parsed[key]`` when the model closed the field (a list of values joined by spaces), else the
    text after the last ``<s_{key}>`` tag with tags removed (generation stopped at
    ``max_new_tokens`` before ``</s_{key}>``), else "".
    """
    value = parsed.get(key)
    if isinstance(value, list):
        return " ".join(str(v) for v in value if isinstance(v, str | int | float)).strip()
    if isinstance(value, str):
        return value.strip()
    opening = f"<s_{key}>"
    index = sequence.rfind(opening)
    if index < 0:
        return ""
    return _TAG.sub(" ", sequence[index + len(opening) :]).strip()


def flatten_json(value: Any, prefix: str = "", limit: int = MAX_FIELDS) -> list[tuple[str, Any]]:
    """Leaves of a parsed Donut JSON as ``(path, value)`` in document order, at most ``limit``.

    Paths join keys with ``.`` and list indices as ``[i]``: ``{"menu": [{"price": "3"}]}`` ->
    ``[("menu[0].price", "3")]``. A top-level list starts with its index (``[0].nm``). Empty
    dicts and lists give no leaves; ``token2json``'s fallback key ``text_sequence`` (a sequence
    it could not parse) is kept as a leaf under that name.
    """
    leaves: list[tuple[str, Any]] = []
    stack: list[tuple[str, Any]] = [(prefix, value)]
    while stack and len(leaves) < limit:
        path, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(item))))
        else:
            leaves.append((path, item))
    return leaves


def category_tokens(added_vocab: dict[str, int]) -> dict[str, int]:
    """Categorical class tokens of a Donut tokenizer (``<letter/>`` -> ``letter``), by name -> id.

    ``<sep/>`` (Donut's list separator) is not a class.
    """
    found = {}
    for token, token_id in added_vocab.items():
        match = _CATEGORY.fullmatch(token)
        if match and match.group(1) != "sep":
            found[match.group(1)] = int(token_id)
    return found


def prompt_tags(prompt: str) -> list[str]:
    """The Donut tags of a prompt template (``<s_docvqa>``, ``</s_question>``), in order."""
    return _TAG.findall(prompt)


# -- the engine ----------------------------------------------------------------------------


@register_backend
class DonutEngine(DocumentModelEngine[DonutOptions]):
    """A Donut checkpoint (hub id or local folder) with its DonutProcessor; see the module docstring.

    Catalog options: :class:`~engines.documents.options.DonutOptions` (``task_prompts``: task
    name -> prompt, the QA prompt holding ``{question}``; ``max_new_tokens``; ``answer_key``,
    ``class_key``; ``dtype``, ``max_question_chars``).
    """

    backend = "donut"
    tasks = frozenset(DEFAULT_PROMPTS)

    def load(self) -> None:
        """Load the processor and the model; refuse tasks whose prompt tags the tokenizer lacks.

        Raises:
            ModelLoadError: a listed task's prompt uses a tag that is not one token of the
                checkpoint's vocabulary, i.e. it was not fine-tuned for that task
                (MODEL_SOURCE_INVALID).
            Exception: whatever transformers raises for a missing or broken checkpoint.

        """
        from transformers import DonutProcessor, VisionEncoderDecoderModel

        resolved = resolve_source(self.spec.source)
        local = resolved.path is not None
        overrides = {Task(name): prompt for name, prompt in self.options.task_prompts.items()}
        self.task_prompts = {**DEFAULT_PROMPTS, **overrides}
        processor = DonutProcessor.from_pretrained(resolved.location, local_files_only=local)
        tokenizer = processor.tokenizer
        vocab = tokenizer.get_vocab()
        served = {
            task for task, prompt in self.task_prompts.items() if all(t in vocab for t in prompt_tags(prompt))
        }
        self.served = frozenset(served)
        self.refuse_unserved(
            self.spec, self.served, "Donut model whose vocabulary lacks the task's prompt tags"
        )
        with hf_construction():  # one build at a time: engines/hf_construction.py
            model = VisionEncoderDecoderModel.from_pretrained(
                resolved.location,
                dtype=torch_dtype_for(self.device, self.options.dtype),
                local_files_only=local,
            )
        self.model = model.to(self.device).eval()
        self.processor = processor
        self.positions = int(getattr(model.config.decoder, "max_position_embeddings", 1024) or 1024)
        self.added_vocab = tokenizer.get_added_vocab()
        self.categories = category_tokens(self.added_vocab)
        self.special = tuple(
            str(t) for t in (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) if t is not None
        )

    # -- blocking work on the lane ---------------------------------------------------------

    def _pixels(self, image: Image) -> Any:
        pixels = self.processor(images=image.convert("RGB"), return_tensors="pt").pixel_values
        return pixels.to(self.device, next(self.model.parameters()).dtype)

    def _prompt_ids(self, prompt: str, *, field: str | None) -> list[int]:
        ids = self.processor.tokenizer(prompt, add_special_tokens=False).input_ids
        if len(ids) + 1 > self.positions:
            raise InputTooLongError(
                f"prompt has {len(ids)} tokens, more than model {self.spec.name!r}'s decoder holds "
                f"({self.positions})",
                field=field or "task_prompts",
                max_tokens=self.positions - 1,
                model=self.spec.name,
            )
        return ids

    def _generate(self, image: Image, prompt_ids: list[int]) -> tuple[dict[str, Any], str, float]:
        """Greedy decoding after ``prompt_ids``: (parsed JSON, cleaned sequence, score).

        The score is exp(mean log-probability) of the generated tokens, in [0, 1].
        """
        import torch

        tokenizer = self.processor.tokenizer
        new_tokens = max(1, min(self.options.max_new_tokens, self.positions - len(prompt_ids)))
        decoder_input_ids = torch.tensor([prompt_ids], device=self.device)
        with torch.inference_mode():
            out = self.model.generate(
                self._pixels(image),
                decoder_input_ids=decoder_input_ids,
                max_new_tokens=new_tokens,
                do_sample=False,
                num_beams=1,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                bad_words_ids=[[tokenizer.unk_token_id]] if tokenizer.unk_token_id is not None else None,
                use_cache=True,
                return_dict_in_generate=True,
                output_scores=True,
            )
            transition = self.model.compute_transition_scores(
                out.sequences, out.scores, normalize_logits=True
            )
        logprobs = transition[0].float().cpu().numpy()
        logprobs = logprobs[np.isfinite(logprobs)]  # positions after the end are padding
        # Per-token geometric mean of the sequence probability: the product itself falls towards 0
        # with length, so a long correct receipt would score below a short wrong answer.
        probability = float(np.exp(logprobs.mean())) if logprobs.size else 0.0
        sequence = clean_sequence(tokenizer.batch_decode(out.sequences)[0], self.special)
        parsed = self.processor.token2json(sequence, added_vocab=self.added_vocab)
        return (parsed if isinstance(parsed, dict) else {}), sequence, probability

    def _answer(self, image: Image, page: OcrPage, question: str) -> DocumentAnswer:
        # Angle brackets would let a question write Donut tags (close the question, open an answer).
        safe = question.replace("<", " ").replace(">", " ")
        prompt = self.task_prompts[Task.DOCUMENT_QA].replace("{question}", safe)
        ids = self._prompt_ids(prompt, field="question")
        if len(ids) + self.options.max_new_tokens > self.positions:
            raise InputTooLongError(
                f"question leaves fewer than max_new_tokens={self.options.max_new_tokens} of model "
                f"{self.spec.name!r}'s {self.positions} decoder positions",
                field="question",
                max_tokens=self.positions - self.options.max_new_tokens,
                model=self.spec.name,
            )
        parsed, sequence, probability = self._generate(image, ids)
        answer = answer_from(parsed, sequence, self.options.answer_key)
        citations = find_citations(answer, page.lines, page.page_number) if answer else []
        return DocumentAnswer(answer=answer, score=probability, citations=citations)

    def _fields(self, image: Image, page: OcrPage) -> list[DocumentField]:
        ids = self._prompt_ids(self.task_prompts[Task.EXTRACT_FIELDS], field=None)
        parsed, _, probability = self._generate(image, ids)
        return [
            DocumentField(
                name=path,
                value=value,
                confidence=probability,
                citations=find_citations(str(value), page.lines, page.page_number) if value else [],
            )
            for path, value in flatten_json(parsed)
            if value or path != "text_sequence"  # nothing parsed and nothing left over
        ]

    def _classify(self, image: Image, page: OcrPage) -> list[DocumentLabel]:
        import torch

        ids = self._prompt_ids(self.task_prompts[Task.CLASSIFY_DOCUMENT], field=None)
        key = self.options.class_key
        opening = self.processor.tokenizer.get_vocab().get(f"<s_{key}>")
        if self.categories and opening is not None:
            # One decoder step after "<s_class>": the class token's distribution over all classes.
            decoder_input_ids = torch.tensor([[*ids, opening]], device=self.device)
            with torch.inference_mode():
                logits = self.model(
                    pixel_values=self._pixels(image), decoder_input_ids=decoder_input_ids
                ).logits
            last = logits[0, -1].float().cpu().numpy()
            names = list(self.categories)
            scores = softmax(last[[self.categories[n] for n in names]])
            order = np.argsort(-scores, kind="stable")
            return [DocumentLabel(names[i], float(scores[i])) for i in order]
        parsed, _, probability = self._generate(image, ids)
        value = parsed.get(key)
        label = (
            value if isinstance(value, str) else " ".join(map(str, value)) if isinstance(value, list) else ""
        )
        return [DocumentLabel(label, probability)] if label else []

    # -- task methods ----------------------------------------------------------------------

    async def answer_question(self, image: Image, page: OcrPage, question: str) -> DocumentAnswer:
        """Donut's answer to ``question`` about ``image`` (one lane job; ``page`` gives citations).

        Returns:
            The ``answer`` field (stripped; "" when the model wrote none), the generated tokens'
            mean probability (geometric) in [0, 1], and where the answer's text appears among the
            OCR lines.

        Raises:
            TaskNotSupportedError: the checkpoint's vocabulary lacks the QA prompt's tags.
            InvalidArgumentError: an empty question.
            InputTooLongError: a question over ``max_question_chars`` characters, or one whose
                prompt leaves fewer than ``max_new_tokens`` decoder positions.

        """
        self.require(Task.DOCUMENT_QA)
        text = self.check_question(question)
        return await self.page_job(self._answer, image, page, text)

    async def extract_fields(self, image: Image, page: OcrPage) -> list[DocumentField]:
        """The parsed JSON's leaves as fields (paths such as ``menu[0].price``), in generated order.

        Every field's confidence is the generated tokens' mean probability (geometric; Donut
        scores no field on its own); citations come from the OCR lines. A sequence that parsed to
        nothing gives no fields (a non-empty unparsed one comes back as ``text_sequence``).

        Raises:
            TaskNotSupportedError: the checkpoint's vocabulary lacks the fields prompt's tags.

        """
        self.require(Task.EXTRACT_FIELDS)
        return await self.page_job(self._fields, image, page)

    async def classify_document(self, image: Image, page: OcrPage) -> list[DocumentLabel]:
        """Document classes best first (see the module docstring for how they are scored).

        Raises:
            TaskNotSupportedError: the checkpoint's vocabulary lacks the classification prompt's tags.

        """
        self.require(Task.CLASSIFY_DOCUMENT)
        return await self.page_job(self._classify, image, page)
