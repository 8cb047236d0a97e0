"""Write a small word-level Hugging Face tokenizer to a directory, for GuideLLM offline.

GuideLLM's synthetic data needs a tokenizer; the hub is out of reach here, so this builds one
locally (2,000 words, whitespace split). Token counts are the benchmark server's, not this one's.
Run with the venv that has GuideLLM (it brings `tokenizers` and `transformers`):
    /tmp/bench-venv/bin/python benchmarks/make_tokenizer.py /tmp/bench-tok
"""

from __future__ import annotations

import sys


def main() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "[PAD]", *(f"w{i}" for i in range(2000)), "tok", "the", "a", "hello"]
    vocab = {word: i for i, word in enumerate(words)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]")
    fast.save_pretrained(sys.argv[1])


if __name__ == "__main__":
    main()
