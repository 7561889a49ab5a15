"""A model read from another format, and writing it as a kbert pre-trained directory."""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

import numpy as np
import tensorflow as tf

from kbert.checkpoints import weight_map
from kbert.files import atomic_directory
from kbert.checkpoints.tokenizer_files import check_vocab_size
from kbert.data.vocabulary import read_vocab
from kbert.checkpoints.tokenizer_files import write_vocab
from kbert.models.bert.bert_encoder import BertEncoder
from kbert.models.bert.bert_pretrainer import BertPretrainer
from kbert.checkpoints.pretrained import PRETRAINER_WEIGHTS
from kbert.checkpoints.pretrained import VOCAB
from kbert.checkpoints.pretrained import load_encoder
from kbert.checkpoints.pretrained import load_pretrainer
from kbert.checkpoints.pretrained import read_sentence_config
from kbert.checkpoints.pretrained import read_tokenizer_config
from kbert.checkpoints.pretrained import save_pretrained
from kbert.checkpoints.pretrained import tokenizer_file_name


@dataclasses.dataclass
class ConvertedModel:
    """An encoder (and pre-training heads) with its tokenizer settings, from any source.

    Every reader in `kbert.export` (`load_bert_tf1`, `load_huggingface`,
    `load_keras_hub`, `load_kbert`) returns one, and every writer
    (`ConvertedModel.save_pretrained`, `save_bert_tf1`, `save_keras_hub_preset`)
    takes one, so any source converts to any target.

    Args:
        encoder: `kbert.models.BertEncoder` (or `ModernBertEncoder`). The
            encoder, weights loaded.
        pretrainer: `kbert.models.BertPretrainer` (or `ModernBertPretrainer`)
            or None. Set when the source had the masked-LM head (and the NSP
            head, when `pretrainer.next_sentence`).
        vocabulary: list of str or None. WordPiece tokens in id order.
        do_lower_case: bool or None. Whether text is lower-cased (and accents
            stripped) before WordPiece, as the source's tokenizer did.
        source: str. What was read, for the summary.
        skipped: list of str. Source tensors deliberately not converted
            (optimizer state, tied copies, unknown tensors when ignored).
        sentence_config: dict or None. How the source makes sentence vectors
            (a sentence-transformers model's pooling and normalisation),
            written as `sentence_config.json`.
        notes: list of str. What the reader had to decide or leave out (a
            config inferred from shapes, a layer the source lacks).
        tokenizer_file: str or None. A byte-level BPE `tokenizer.json` (a
            ModernBERT's), copied into the directory as it is; set instead of
            `vocabulary`.

    Example:

    >>> converted = kbert.checkpoints.load_huggingface("all-MiniLM-L6-v2/")
    >>> converted.save_pretrained("minilm/")
    """

    encoder: BertEncoder
    pretrainer: BertPretrainer | None = None
    vocabulary: list[str] | None = None
    do_lower_case: bool | None = None
    source: str = ""
    skipped: list[str] = dataclasses.field(default_factory=list)
    sentence_config: dict | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    tokenizer_file: str | None = None

    def __post_init__(self):
        if self.vocabulary is not None:
            check_vocab_size(self.vocabulary, self.encoder.vocabulary_size,
                             f"the vocabulary of {self.source or 'the source'}",
                             self.source or "the model")

    @property
    def model(self):
        """The pre-trainer when there are heads, else the encoder."""
        return self.pretrainer if self.pretrainer is not None else self.encoder

    def save_pretrained(self, output_dir: str, overwrite: bool = False) -> None:
        """Writes a kbert pre-trained directory atomically (see `kbert.checkpoints.pretrained`).

        Args:
            output_dir: str. Must not exist unless `overwrite`.
            overwrite: bool. Replace an existing directory. Defaults to False.
        """
        with atomic_directory(output_dir, overwrite) as temporary:
            vocab_file = self.tokenizer_file
            if self.vocabulary is not None:
                vocab_file = os.path.join(temporary, VOCAB)
                write_vocab(self.vocabulary, vocab_file)
            save_pretrained(temporary, self.encoder, vocab_file=vocab_file,
                            do_lower_case=self.do_lower_case, pretrainer=self.pretrainer,
                            sentence_config=self.sentence_config)

    def summary(self) -> str:
        """A few lines describing what was converted."""
        e = self.encoder
        heads = "none"
        if self.pretrainer is not None:
            heads = ("masked LM + next sentence" if getattr(self.pretrainer, "next_sentence", False)
                     else "masked LM")
        lines = [
            f"source: {self.source}",
            f"encoder: L={e.num_layers} H={e.hidden_dim} A={e.num_heads} "
            f"I={e.intermediate_dim} V={e.vocabulary_size} P={e.max_sequence_length} "
            + (f"E={e.embedding_dim} "
               if getattr(e, "embeddings_projection", None) is not None else "") +
            f"activation={e.activation} layer_norm_epsilon={e.layer_norm_epsilon:g}",
            f"parameters: encoder={e.count_params():,}"
            + (f" pretrainer={self.pretrainer.count_params():,}" if self.pretrainer else ""),
            f"heads: {heads}",
            (f"tokenizer: {self.tokenizer_file} (byte-level BPE)" if self.tokenizer_file else
             f"vocabulary: {len(self.vocabulary) if self.vocabulary else 'none'} tokens, "
             f"do_lower_case={self.do_lower_case}"),
        ]
        if self.sentence_config is not None:
            lines.append(f"sentence vectors: {self.sentence_config['pooling']} pooling, "
                         f"normalize={self.sentence_config['normalize']} "
                         f"(from {self.sentence_config.get('source', 'the source')})")
        if self.skipped:
            shown = ", ".join(self.skipped[:8]) + (" ..." if len(self.skipped) > 8 else "")
            lines.append(f"not converted: {len(self.skipped)} tensor(s): {shown}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def from_tf1_arrays(
    arguments: dict,
    shapes: dict[str, tuple],
    read: Callable[[str], np.ndarray],
    source: str,
    config_source: str,
    vocabulary: list[str] | None = None,
    do_lower_case: bool | None = None,
    ignore_unknown: bool = False,
    skipped: list[str] | None = None,
    display: Callable[[str], str] = str,
    prefix: str = weight_map.BERT_PREFIX,
    known: Callable[[str], bool] = lambda name: False,
) -> ConvertedModel:
    """Builds a `ConvertedModel` from TF1-named tensors (the path every reader shares).

    Args:
        arguments: dict. `BertEncoder` arguments from the source's config.
        shapes: dict of TF1 name to shape, for every tensor of the source.
        read: callable returning the array of a TF1 name.
        source: str. The weights, named in messages.
        config_source: str. The config, named in messages.
        vocabulary: list of str or None.
        do_lower_case: bool or None.
        ignore_unknown: bool. Skip unknown tensors instead of failing.
        skipped: list of str. Already-skipped source names, for the report.
        display: callable naming a TF1 name in messages as the source does.
        prefix: str. `"bert"`, or `"electra"` for google-research/electra's
            discriminator (no pooler, no BERT heads).
        known: callable. Source names to skip without an error (ELECTRA's
            generator and pre-training heads).

    Returns:
        The `ConvertedModel`.
    """
    weight_map.check_config_matches(arguments, shapes, config_source, source, display, prefix)
    rows = shapes.get(f"{prefix}/embeddings/word_embeddings")
    if vocabulary is not None and rows is not None:
        check_vocab_size(vocabulary, rows[0], "the vocabulary", source)
    masked_lm, next_sentence = (weight_map.has_heads(shapes) if prefix == weight_map.BERT_PREFIX
                                else (False, False))
    encoder = BertEncoder(**arguments)
    pretrainer = BertPretrainer(encoder, next_sentence=next_sentence) if masked_lm else None
    not_loaded = weight_map.assign_from_tf1(
        pretrainer if pretrainer is not None else encoder, shapes, read, source, ignore_unknown,
        display, prefix, known,
    )
    return ConvertedModel(encoder, pretrainer, vocabulary, do_lower_case, source,
                          sorted((skipped or []) + not_loaded))



def load_kbert(directory: str) -> ConvertedModel:
    """Reads a kbert pre-trained directory (heads included when saved) as a `ConvertedModel`.

    Args:
        directory: str. What `kbert-pretrain` or `kbert-convert` wrote.

    Returns:
        A `ConvertedModel`, ready for `save_bert_tf1` or `save_keras_hub_preset`.

    Example:

    >>> kbert.checkpoints.save_bert_tf1(kbert.checkpoints.load_kbert("minilm/"), "minilm_tf1/")
    """
    settings = read_tokenizer_config(directory)
    vocab_file = settings["vocab_file"]
    # A byte-level BPE `tokenizer.json` is no WordPiece vocabulary for these formats.
    vocabulary = (read_vocab(vocab_file) if vocab_file and tokenizer_file_name(vocab_file) == VOCAB
                  else None)
    # A byte-level BPE `tokenizer.json` goes along as a file (`--to=hf` copies it).
    tokenizer_json = (vocab_file if vocab_file and tokenizer_file_name(vocab_file) != VOCAB
                      else None)
    pretrainer = None
    if tf.io.gfile.exists(os.path.join(directory, PRETRAINER_WEIGHTS)):
        # The file doesn't record whether the NSP head was saved; the weights
        # only load into the matching structure.
        for next_sentence in (True, False):
            try:
                pretrainer = load_pretrainer(directory, next_sentence=next_sentence)
                break
            except ValueError:
                continue
        if pretrainer is None:
            raise ValueError(f"{os.path.join(directory, PRETRAINER_WEIGHTS)} does not match the "
                             f"encoder of {directory}'s bert_config.json.")
    encoder = pretrainer.encoder if pretrainer is not None else load_encoder(directory)
    return ConvertedModel(encoder, pretrainer, vocabulary, settings["do_lower_case"], directory,
                          sentence_config=read_sentence_config(directory),
                          tokenizer_file=tokenizer_json)
