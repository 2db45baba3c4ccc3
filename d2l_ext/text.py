"""The text the chapter on transformers trains on: this book's own English prose, as bytes.

A byte-level model needs no tokenizer: every byte is a token (a vocabulary of 256), and a
training example is a window of ``seq + 1`` consecutive bytes, the model reading the first
``seq`` and predicting the last ``seq``. The corpus ships with the package
(``data/corpus/book-en.txt``, CC BY-SA 4.0, provenance beside it), so the chapter runs
offline. Framework-free: each tab turns the windows into its own arrays.
"""

from __future__ import annotations

from importlib import resources

import numpy as np

VOCAB = 256  # one token per byte


def book_corpus() -> np.ndarray:
    """The corpus as an array of byte values (uint8), in the order of the text."""
    data = (resources.files("d2l_ext") / "data" / "corpus" / "book-en.txt").read_bytes()
    return np.frombuffer(data, dtype=np.uint8)


def windows(data: np.ndarray, batch: int, seq: int,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` random windows of ``data``: inputs of ``seq`` bytes and, shifted by one,
    their targets (both int64, shape ``(batch, seq)``)."""
    if batch < 1 or seq < 1:
        raise ValueError(f"batch and seq must be at least 1, got {batch} and {seq}")
    if len(data) < seq + 1:
        raise ValueError(f"a window of {seq + 1} bytes does not fit in {len(data)} bytes of "
                         "text: use a shorter seq")
    starts = rng.integers(0, len(data) - seq, size=batch)
    rows = np.stack([data[s:s + seq + 1] for s in starts]).astype(np.int64)
    return rows[:, :-1], rows[:, 1:]
