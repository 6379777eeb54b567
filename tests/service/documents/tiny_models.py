"""Tiny randomly initialised LayoutLMv3 and Donut models, built offline into a folder.

No document model's weights ship on PyPI and the tests have no hub, so these stand in for the real
ones: the same classes, processors and files as ``microsoft/layoutlmv3-base`` fine-tunes and
``naver-clova-ix/donut-base-finetuned-*``, at a few hundred kilobytes. Their outputs are random;
the tests check the engines' contract (shapes, spans, labels, parsing), not quality.
"""

from __future__ import annotations

import string
from pathlib import Path

# Characters the tiny vocabularies hold one token each for (words split into characters).
CHARACTERS = string.ascii_letters + string.digits + string.punctuation + "€£"

LAYOUT_LABELS = ["O", "B-HEADER", "I-HEADER", "B-QUESTION", "I-QUESTION", "B-ANSWER", "I-ANSWER"]
DOC_CLASSES = ["letter", "invoice", "form"]
LAYOUT_MAX_POSITIONS = 130  # 128 tokens: RoBERTa positions start after the padding index (2)
LAYOUT_IMAGE_SIZE = 64

DONUT_TASK_TOKENS = [
    "<s_docvqa>",
    "<s_question>",
    "</s_question>",
    "<s_answer>",
    "</s_answer>",
    "<s_cord-v2>",
    "<s_menu>",
    "</s_menu>",
    "<s_nm>",
    "</s_nm>",
    "<s_price>",
    "</s_price>",
    "<s_total>",
    "</s_total>",
    "<s_total_price>",
    "</s_total_price>",
    "<sep/>",
    "<s_rvlcdip>",
    "<s_class>",
    "</s_class>",
    *(f"<{name}/>" for name in DOC_CLASSES),
]


def _layoutlmv3_tokenizer():
    """A byte-level BPE LayoutLMv3 tokenizer whose vocabulary is single byte-level characters."""
    from tokenizers import pre_tokenizers
    from transformers import LayoutLMv3Tokenizer

    vocab = {token: i for i, token in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])}
    for symbol in pre_tokenizers.ByteLevel.alphabet():
        vocab.setdefault(symbol, len(vocab))
    merges = [("Ġ", "t"), ("Ġ", "a")]  # a couple of merges, so some words start with a merged token
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    return LayoutLMv3Tokenizer(vocab=vocab, merges=merges, model_max_length=LAYOUT_MAX_POSITIONS - 2)


def build_layoutlmv3(out: Path, head: str, seed: int = 0) -> Path:
    """Save a tiny LayoutLMv3 with ``head`` (``qa``, ``token`` or ``sequence``) and its processor to ``out``."""
    import torch
    from transformers import (
        LayoutLMv3Config,
        LayoutLMv3ForQuestionAnswering,
        LayoutLMv3ForSequenceClassification,
        LayoutLMv3ForTokenClassification,
        LayoutLMv3ImageProcessorPil,
        LayoutLMv3Processor,
    )

    torch.manual_seed(seed)
    tokenizer = _layoutlmv3_tokenizer()
    labels = {"qa": ["start", "end"], "token": LAYOUT_LABELS, "sequence": DOC_CLASSES}[head]
    config = LayoutLMv3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LAYOUT_MAX_POSITIONS,
        max_2d_position_embeddings=1024,
        coordinate_size=6,  # 4 * 6 + 2 * 4 = hidden_size
        shape_size=4,
        rel_pos_bins=32,
        max_rel_pos=128,
        rel_2d_pos_bins=64,
        max_rel_2d_pos=256,
        input_size=LAYOUT_IMAGE_SIZE,
        patch_size=16,
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    model_class = {
        "qa": LayoutLMv3ForQuestionAnswering,
        "token": LayoutLMv3ForTokenClassification,
        "sequence": LayoutLMv3ForSequenceClassification,
    }[head]
    model = model_class(config).eval()
    image_processor = LayoutLMv3ImageProcessorPil(
        apply_ocr=False, size={"height": LAYOUT_IMAGE_SIZE, "width": LAYOUT_IMAGE_SIZE}
    )
    processor = LayoutLMv3Processor(image_processor=image_processor, tokenizer=tokenizer)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def _donut_tokenizer():
    """An XLM-RoBERTa (Unigram) tokenizer of single characters plus Donut's task and field tokens."""
    from transformers import XLMRobertaTokenizer

    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("<mask>", 0.0), ("▁", -2.0)]
    pieces += [(ch, -3.0) for ch in CHARACTERS]
    pieces += [("▁" + ch, -2.5) for ch in string.ascii_letters + string.digits + "$€£"]
    tokenizer = XLMRobertaTokenizer(vocab=pieces, model_max_length=512)
    tokenizer.add_special_tokens({"additional_special_tokens": DONUT_TASK_TOKENS})
    return tokenizer


def build_donut(out: Path, seed: int = 0) -> Path:
    """Save a tiny Donut (DonutSwin encoder + MBart decoder) and its DonutProcessor to ``out``."""
    import torch
    from transformers import (
        DonutImageProcessorPil,
        DonutProcessor,
        DonutSwinConfig,
        DonutSwinModel,
        MBartConfig,
        MBartForCausalLM,
        VisionEncoderDecoderModel,
    )

    torch.manual_seed(seed)
    tokenizer = _donut_tokenizer()
    encoder = DonutSwinModel(
        DonutSwinConfig(
            image_size=[64, 48],
            patch_size=4,
            embed_dim=16,
            depths=[1, 1],
            num_heads=[1, 2],
            window_size=4,
        )
    )
    decoder = MBartForCausalLM(
        MBartConfig(
            vocab_size=len(tokenizer),
            d_model=32,
            decoder_layers=1,
            decoder_attention_heads=2,
            decoder_ffn_dim=64,
            encoder_layers=1,
            encoder_attention_heads=2,
            encoder_ffn_dim=64,
            max_position_embeddings=256,
            is_decoder=True,
            is_encoder_decoder=False,
            add_cross_attention=True,
            scale_embedding=True,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    )
    model = VisionEncoderDecoderModel(encoder=encoder, decoder=decoder).eval()
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.decoder_start_token_id = tokenizer.bos_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    image_processor = DonutImageProcessorPil(size={"height": 64, "width": 48}, do_align_long_axis=False)
    processor = DonutProcessor(image_processor=image_processor, tokenizer=tokenizer)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


INVOICE_LINES = [
    "INVOICE No. A-17",
    "Date: 2024-03-01",
    "Bill to: Ada Lovelace",
    "Tea 3.00",
    "Cake 4.50",
    "Total due: $1,234.56",
]


def invoice_page(lines: list[str] | None = None, *, with_words: bool = True):
    """A rendered page (DejaVu Sans, black on white) and its hand-made OcrPage with word boxes.

    Boxes come from PIL's ``textbbox`` of each word where it was drawn, so they are exact; with
    ``with_words`` False the lines carry no words (as from an OCR engine without word boxes).
    """
    from PIL import Image, ImageDraw

    from engines.ocr.types import Box, OcrLine, OcrPage, OcrWord
    from tests.service.ocr.helpers import font

    lines = INVOICE_LINES if lines is None else lines
    face = font("DejaVuSans", 24)
    width, height = 800, 60 + 44 * len(lines)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    ocr_lines = []
    for row, text in enumerate(lines):
        x, y = 30.0, 30.0 + 44 * row
        words = []
        for word in text.split():
            left, top, right, bottom = draw.textbbox((x, y), word, font=face)
            draw.text((x, y), word, font=face, fill="black")
            words.append(OcrWord(word, Box(left, top, right - left, bottom - top), 0.95))
            x = right + draw.textlength(" ", font=face)
        box = Box.union([w.box for w in words])
        ocr_lines.append(OcrLine(text, box, 0.95, words if with_words else []))
    page = OcrPage(1, 1, "\n".join(lines), ocr_lines, width, height, "test", 0.95)
    return image, page
