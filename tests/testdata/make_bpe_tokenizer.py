"""Writes tests/testdata/bpe_tokenizer.json: a small byte-level BPE laid out like ModernBERT's.

ModernBERT's own `tokenizer.json` (GPT-NeoX's BPE, 50,368 ids) cannot be
downloaded here, so the parity tests use this one, trained with the Hugging
Face `tokenizers` library on the Gutenberg slices of this folder plus a few
lines of accented, CJK and emoji text, and given ModernBERT's structure:
NFC normalizer, `ByteLevel` pre-tokenizer (no prefix space, GPT-2's regex),
a BPE model without unk token, `|||IP_ADDRESS|||` and `<|padding|>` as ids 0
and 1, non-special normalized added tokens (runs of 2 to 24 spaces,
`|||EMAIL_ADDRESS|||`, `|||PHONE_NUMBER|||`), then the special tokens
`<|endoftext|>`, `[UNK]`, `[CLS]`, `[SEP]`, `[PAD]`, `[MASK]` (with
`lstrip`, as ModernBERT's) and `[unused0]`..`[unused3]`, and the
post-processor template `[CLS] $A [SEP]` / `[CLS] $A [SEP] $B [SEP]`.

Run from the repository root (deterministic for a given `tokenizers` version;
written with 0.23.3):

    python tests/testdata/make_bpe_tokenizer.py
"""

import json
import os

from tokenizers import AddedToken
from tokenizers import Tokenizer
from tokenizers import decoders
from tokenizers import models
from tokenizers import normalizers
from tokenizers import pre_tokenizers
from tokenizers import processors
from tokenizers import trainers

HERE = os.path.dirname(os.path.abspath(__file__))
EXTRA_LINES = [
    "Café, naïve façade, résumé, Zürich, São Paulo, Ærø, Ångström, señor, coöperate.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다。",
    "Emoji: 😀 😂 👍🏽 🎉 ❤️ 🇫🇷 and symbols ©®™ € £ ¥ ½ ≤ ≥ ∞ — “quoted” ‘text’…",
    "Numbers 1234567890, 3.14159, 2,718, 1e-10, 100% and dates 2024-12-19.",
]


def main():
    texts = []
    for name in ("austen-persuasion-head.txt", "emma_chapter1.txt",
                 "melville-moby_dick-head.crlf.txt"):
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            texts.extend(f.read().splitlines())
    texts += EXTRA_LINES * 20

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1100, min_frequency=2, show_progress=False,
        special_tokens=["|||IP_ADDRESS|||", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.add_tokens([AddedToken(" " * n, normalized=True) for n in range(24, 1, -1)]
                         + [AddedToken("|||EMAIL_ADDRESS|||", normalized=True),
                            AddedToken("|||PHONE_NUMBER|||", normalized=True)])
    tokenizer.add_special_tokens(
        [AddedToken(token, normalized=False) for token in
         ("<|endoftext|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]")]
        + [AddedToken("[MASK]", lstrip=True, normalized=False)]
        + [AddedToken(f"[unused{i}]", normalized=False) for i in range(4)])
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    config = json.loads(tokenizer.to_str())
    # ModernBERT's id 0 is a normalized, non-special added token.
    for token in config["added_tokens"]:
        if token["content"] == "|||IP_ADDRESS|||":
            token.update(special=False, normalized=True)
    text = json.dumps(config, ensure_ascii=False, separators=(",", ":"))
    Tokenizer.from_str(text)  # Still a valid tokenizer.
    with open(os.path.join(HERE, "bpe_tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
