"""Which backend and tasks serve a hub repository, told from its file list and config files.

The rules, first match wins:

1. a ``.gguf`` file (``--file`` names one, or the repo has exactly one and no ``config.json``):
   ``llama_cpp`` / generate;
2. a sentence-transformers repo (``modules.json``, ``sentence_bert_config.json`` or
   ``config_sentence_transformers.json``): ``cross_encoder`` / rerank when that config says
   ``"model_type": "CrossEncoder"``, else ``sentence_transformers`` / embed;
3. ``config.json`` ``architectures``: ``*ForCausalLM`` / ``*LMHeadModel`` → ``transformers`` /
   generate; ``*ForSequenceClassification`` with one label → ``cross_encoder`` / rerank (a
   classic cross-encoder scores a pair with one logit), with more → ``transformers_classifier`` /
   classify; ``*ForTokenClassification`` → ``transformers_ner`` / extract_entities.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.admin.connection import CommandError

#: Small JSON files the rules read; fetched before the weights.
CONFIG_FILES = (
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
)

#: Files a non-GGUF repo does not need: other frameworks' weights and exports the engines never read.
_SKIPPED = (
    "*.gguf",
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.onnx",
    "*.onnx_data",
    "*.tflite",
    "*.mlmodel",
    "onnx/*",
    "openvino/*",
    "coreml/*",
    "tf_model*",
    "flax_model*",
    "rust_model*",
    ".gitattributes",
)
_PICKLED = ("pytorch_model*.bin", "*.pt", "*.pth", "*.ckpt")

_ST_MARKERS = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")

#: Shown when a repo has too many GGUF files to list them all in one line.
_MAX_LISTED = 8


@dataclass(frozen=True, slots=True)
class Plan:
    """What to download and how the catalog entry serves it.

    Attributes:
        backend: Engine registry key (``"sentence_transformers"``, ``"llama_cpp"``, ...).
        tasks: Catalog task names (``"embed"``, ``"generate"``, ...).
        files: Repo paths to download.
        entry_file: The file the catalog ``source`` names (a GGUF file), or None for the folder.
        options: Backend options for the catalog entry.

    """

    backend: str
    tasks: tuple[str, ...]
    files: tuple[str, ...]
    entry_file: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


def _matches(path: str, patterns: Sequence[str]) -> bool:
    name = posixpath.basename(path)
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(name, p) for p in patterns)


def weight_files(paths: Sequence[str]) -> tuple[str, ...]:
    """The files a transformers/sentence-transformers repo needs: all but other formats' weights.

    Pickled PyTorch weights are left out when safetensors are there (both are usually uploaded).
    """
    kept = [p for p in paths if not _matches(p, _SKIPPED)]
    if any(p.endswith(".safetensors") for p in kept):
        kept = [p for p in kept if not _matches(p, _PICKLED)]
    return tuple(kept)


def choose_gguf(paths: Sequence[str], wanted: str | None) -> str | None:
    """The GGUF file to use: ``wanted`` (a path or a file name), the only one, or None when there is none.

    Raises:
        CommandError: ``wanted`` is not a GGUF file of the repo, or several are there and none was chosen.

    """
    ggufs = [p for p in paths if p.lower().endswith(".gguf")]
    if wanted is not None:
        for path in ggufs:
            if wanted in (path, posixpath.basename(path)):
                return path
        listed = ", ".join(ggufs[:_MAX_LISTED]) or "none"
        raise CommandError(f"--file {wanted} is not a GGUF file of this repo (GGUF files: {listed})")
    if len(ggufs) > 1:
        more = f" and {len(ggufs) - _MAX_LISTED} more" if len(ggufs) > _MAX_LISTED else ""
        raise CommandError(
            f"the repo has {len(ggufs)} GGUF files; choose one with --file: "
            f"{', '.join(ggufs[:_MAX_LISTED])}{more}"
        )
    return ggufs[0] if ggufs else None


def plan_for(paths: Sequence[str], configs: Mapping[str, Any], gguf_file: str | None = None) -> Plan:
    """Apply the module's rules to a repo's file paths and its parsed config files.

    Args:
        paths: Every file path of the repo (``"1_Pooling/config.json"``, ``"model.safetensors"``).
        configs: Parsed JSON of those :data:`CONFIG_FILES` the repo has, by file name.
        gguf_file: ``--file``: the GGUF file to serve, when the repo has several.

    Raises:
        CommandError: no rule matches (the message suggests ``--backend`` and ``--task``), or the
            GGUF choice is ambiguous or wrong.

    """
    has_gguf = any(p.lower().endswith(".gguf") for p in paths)
    if gguf_file is not None or (has_gguf and "config.json" not in configs):
        chosen = choose_gguf(paths, gguf_file)
        if chosen is not None:
            return Plan("llama_cpp", ("generate",), (chosen,), entry_file=chosen)
    files = weight_files(paths)
    if any(marker in configs for marker in _ST_MARKERS):
        st_config = configs.get("config_sentence_transformers.json") or {}
        if st_config.get("model_type") == "CrossEncoder":
            return Plan("cross_encoder", ("rerank",), files)
        if st_config.get("model_type") not in (None, "SentenceTransformer"):
            raise CommandError(
                f"sentence-transformers model type {st_config['model_type']!r} is not served here"
            )
        return Plan("sentence_transformers", ("embed",), files)
    architectures = [str(a) for a in (configs.get("config.json") or {}).get("architectures") or ()]
    for arch in architectures:
        if arch.endswith(("ForCausalLM", "LMHeadModel")):
            return Plan("transformers", ("generate",), files)
        if arch.endswith("ForSequenceClassification"):
            labels = _label_count(configs["config.json"])
            if labels == 1:
                return Plan("cross_encoder", ("rerank",), files)
            return Plan("transformers_classifier", ("classify",), files)
        if arch.endswith("ForTokenClassification"):
            return Plan("transformers_ner", ("extract_entities",), files)
    if architectures:
        found = ", ".join(architectures)
    else:
        found = "no architectures in config.json" if configs else "no config files"
    raise CommandError(f"cannot tell which backend serves this repo ({found}); pass --backend and --task")


def _label_count(config: Mapping[str, Any]) -> int:
    if isinstance(config.get("num_labels"), int):
        return config["num_labels"]
    return len(config.get("id2label") or {}) or 2  # transformers' default is two labels


def explicit_plan(paths: Sequence[str], backend: str, tasks: Sequence[str], gguf_file: str | None) -> Plan:
    """The plan for ``--backend``/``--task`` given by the operator: the rules only pick the files.

    Raises:
        CommandError: the GGUF choice is ambiguous or wrong (for ``llama_cpp``).

    """
    if backend == "llama_cpp":
        chosen = choose_gguf(paths, gguf_file)
        if chosen is None:
            raise CommandError("--backend llama_cpp needs a GGUF file, and the repo has none")
        return Plan(backend, tuple(tasks), (chosen,), entry_file=chosen)
    return Plan(backend, tuple(tasks), weight_files(paths))
