"""A tiny Stable Diffusion pipeline folder, built from random weights in about a second.

Every part is the real class (``UNet2DConditionModel``, ``AutoencoderKL``, ``CLIPTextModel``,
``CLIPTokenizer``, ``DDIMScheduler``) at toy sizes, so the engine loads it exactly as it would
a downloaded model; the images are noise, but deterministic noise for a given seed.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

# Latents are 8x8 (the UNet's sample_size); the VAE's four levels scale by 8: 64x64 images.
NATIVE_SIZE = 64
SPECIAL_TOKENS = ("<|startoftext|>", "<|endoftext|>")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which CLIP's byte-level BPE vocabulary is written in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in codes), strict=True))


def write_tokenizer_files(folder: Path) -> tuple[Path, Path]:
    """Write a CLIP vocab.json (every byte alone and with ``</w>``, a few merges, the specials) and merges.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    alphabet = list(bytes_to_unicode().values())
    tokens = alphabet + [f"{c}</w>" for c in alphabet]
    merges = ["a t</w>", "c at</w>", "d o", "do g</w>"]  # "cat", "dog" as one token each
    tokens += ["at</w>", "cat</w>", "do", "dog</w>"]
    tokens += list(SPECIAL_TOKENS)
    vocab = {token: index for index, token in enumerate(tokens)}
    vocab_file = folder / "vocab.json"
    merges_file = folder / "merges.txt"
    vocab_file.write_text(json.dumps(vocab))
    merges_file.write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return vocab_file, merges_file


def build_tiny_pipeline(folder: Path, *, safe_serialization: bool = True) -> Path:
    """Save a tiny StableDiffusionPipeline to ``folder`` (safetensors weights, or pickles when asked).

    Args:
        folder: where the pipeline folder (model_index.json and one folder per part) is written.
        safe_serialization: False writes ``.bin`` (pickle) weights, for the refusal test.

    Returns:
        ``folder``.

    """
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(8, 16),
        layers_per_block=1,
        norm_num_groups=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16,
        attention_head_dim=2,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        block_out_channels=(4, 4, 4, 4),
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=2,
        sample_size=NATIVE_SIZE,
    )
    with tempfile.TemporaryDirectory() as source:  # the tokenizer saves its own files with the pipeline
        vocab_file, merges_file = write_tokenizer_files(Path(source))
        tokenizer = CLIPTokenizer(vocab=str(vocab_file), merges=str(merges_file), model_max_length=77)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=77,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(folder, safe_serialization=safe_serialization)
    return folder
