"""Tiny training runs that turn MiniLM into a cross-encoder or a topic classifier (seconds on 2 CPU cores)."""

from __future__ import annotations

from pathlib import Path

RERANK_PAIRS = [
    ("What is the capital of France?", "Paris is the capital and largest city of France.", 1),
    ("What is the capital of France?", "Bananas are a good source of potassium.", 0),
    ("What is the capital of France?", "The Eiffel Tower was finished in 1889.", 0),
    ("How do I bake bread?", "Mix flour, water, yeast and salt, let it rise, then bake it.", 1),
    ("How do I bake bread?", "The stock market fell sharply on Tuesday.", 0),
    ("Who wrote Hamlet?", "Hamlet is a tragedy written by William Shakespeare.", 1),
    ("Who wrote Hamlet?", "Photosynthesis converts light into chemical energy.", 0),
    ("How tall is Mount Everest?", "Mount Everest is 8,849 metres tall.", 1),
    ("How tall is Mount Everest?", "Cats sleep for most of the day.", 0),
    ("What is the boiling point of water?", "Water boils at 100 degrees Celsius at sea level.", 1),
    ("What is the boiling point of water?", "The Amazon is the largest rainforest.", 0),
    ("Which planet is the largest?", "Jupiter is the largest planet in the solar system.", 1),
    ("Which planet is the largest?", "Bread needs yeast to rise.", 0),
]

CLASSIFIER_LABELS = ["sports", "cooking", "technology"]
CLASSIFIER_EXAMPLES = [
    ("The striker scored twice in the second half.", "sports"),
    ("Our team won the championship final last night.", "sports"),
    ("The tennis match went to five sets.", "sports"),
    ("She broke the world record in the 100 metres.", "sports"),
    ("The coach was fired after ten straight losses.", "sports"),
    ("The goalkeeper saved a penalty in extra time.", "sports"),
    ("Simmer the sauce for twenty minutes, stirring often.", "cooking"),
    ("Whisk the eggs with sugar until pale.", "cooking"),
    ("Season the chicken and roast it at 200 degrees.", "cooking"),
    ("Chop the onions finely and fry them in butter.", "cooking"),
    ("Knead the dough and let it rest for an hour.", "cooking"),
    ("Add a pinch of salt to the boiling pasta water.", "cooking"),
    ("The new phone has a faster processor and more memory.", "technology"),
    ("Install the latest update to fix the security bug.", "technology"),
    ("The startup released an open-source database engine.", "technology"),
    ("My laptop keeps crashing when I run the compiler.", "technology"),
    ("The chip maker announced a smaller transistor process.", "technology"),
    ("Cloud servers scale automatically under heavy traffic.", "technology"),
]


def train_sequence_classifier(
    base: Path,
    out: Path,
    examples: list[tuple[str | tuple[str, str], float | int]],
    *,
    labels: list[str] | None,
    steps: int,
    lr: float,
) -> None:
    """Put a fresh sequence-classification head on ``base``, train it full-batch, save to ``out``.

    ``labels`` None trains a single-logit scorer (binary cross-entropy on 0/1 targets, a
    cross-encoder); otherwise a softmax classifier over ``labels`` (class indices as targets).
    """
    import torch

    torch.manual_seed(0)
    # One thread: on a shared 2-core machine, OpenMP's two threads spin against other processes.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _train(torch, base, out, examples, labels=labels, steps=steps, lr=lr)
    finally:
        torch.set_num_threads(threads)


def _train(torch, base: Path, out: Path, examples, *, labels, steps: int, lr: float) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    if labels is None:
        model = AutoModelForSequenceClassification.from_pretrained(str(base), num_labels=1)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(
            str(base),
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)},
        )
    inputs = [x for x, _ in examples]
    if isinstance(inputs[0], tuple):
        encoded = tokenizer([a for a, _ in inputs], [b for _, b in inputs], padding=True, return_tensors="pt")
    else:
        encoded = tokenizer(inputs, padding=True, return_tensors="pt")
    # Train only the top two layers, pooler and head: seconds instead of minutes on 2 cores.
    base_model = model.base_model
    for module in (base_model.embeddings, *base_model.encoder.layer[:-2]):
        module.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        logits = model(**encoded).logits
        if labels is None:
            target = torch.tensor([float(y) for _, y in examples])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits.squeeze(-1), target)
        else:
            loss = torch.nn.functional.cross_entropy(logits, torch.tensor([int(y) for _, y in examples]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


NER_LABELS = ["O", "B-PER", "I-PER"]
NER_SENTENCES = [
    ("Tim Cook visited Paris on Monday", ["Tim Cook"]),
    ("Yesterday Angela Merkel gave a speech", ["Angela Merkel"]),
    ("The report was written by Marie Curie", ["Marie Curie"]),
    ("Barack Obama met students in the library", ["Barack Obama"]),
    ("We had lunch with Serena Williams today", ["Serena Williams"]),
    ("The bridge was painted red last year", []),
    ("Rain is expected over the weekend", []),
    ("Alan Turing designed an early computer", ["Alan Turing"]),
]


def train_token_classifier(base: Path, out: Path, *, steps: int, lr: float) -> None:
    """Put a fresh token-classification head (O, B-PER, I-PER) on ``base``, train it briefly, save to ``out``."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        tokenizer = AutoTokenizer.from_pretrained(str(base))
        model = AutoModelForTokenClassification.from_pretrained(
            str(base),
            num_labels=len(NER_LABELS),
            id2label=dict(enumerate(NER_LABELS)),
            label2id={label: i for i, label in enumerate(NER_LABELS)},
        )
        texts = [text for text, _ in NER_SENTENCES]
        encoded = tokenizer(texts, padding=True, return_offsets_mapping=True, return_tensors="pt")
        offsets = encoded.pop("offset_mapping")
        targets = torch.full(encoded["input_ids"].shape, -100)
        for row, (text, names) in enumerate(NER_SENTENCES):
            spans = [(text.index(n), text.index(n) + len(n)) for n in names]
            for col, (start, end) in enumerate(offsets[row].tolist()):
                if start == end:
                    continue  # special or padding token
                inside = [s for s in spans if s[0] <= start < s[1]]
                targets[row, col] = 0 if not inside else (1 if start == inside[0][0] else 2)
        base_model = model.base_model
        for module in (base_model.embeddings, *base_model.encoder.layer[:-2]):
            module.requires_grad_(False)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        model.train()
        for _ in range(steps):
            loss = model(**encoded, labels=targets).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    finally:
        torch.set_num_threads(threads)
