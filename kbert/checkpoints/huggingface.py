"""Hugging Face directories <-> kbert: the door, dispatching on the architecture's record.

`load_huggingface` reads `config.json`, finds the architecture whose record
claims its `model_type` (`kbert.models.registry.hugging_face_architecture`),
maps the config with that record's key map (`Architecture.hugging_face`,
pure dicts in `kbert/models/<arch>/`) and hands the directory to the
architecture's converter here. `save_huggingface` (`kbert-convert --to=hf`)
does the reverse for architectures with a writer.

The converters live in this package (they read and write files, which
`kbert.models` never does, and `models` may not import `checkpoints`), so
they are listed in `CONVERTERS`, keyed by the record's name: one line per
architecture that converts.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any
from typing import Callable

from kbert.checkpoints.converted_model import ConvertedModel
from kbert.checkpoints.huggingface_bert import read_huggingface_bert
from kbert.checkpoints.huggingface_modernbert import read_huggingface_modernbert
from kbert.checkpoints.huggingface_modernbert import write_huggingface_modernbert
from kbert.files import read_json
from kbert.models.architecture import ConvertedArguments
from kbert.models.registry import ARCHITECTURES
from kbert.models.registry import architecture_of
from kbert.models.registry import hugging_face_architecture


@dataclasses.dataclass(frozen=True)
class HuggingFaceConverter:
    """An architecture's Hugging Face reader and (optional) writer.

    Attributes:
        read: `(hf_dir, config, arguments, ignore_unknown) -> ConvertedModel`:
            the directory's weights and tokenizer, given its parsed
            `config.json` and what the record's key map made of it.
        write: `(converted, config, output_dir, overwrite) -> notes`, or None
            when kbert does not write the architecture back: the directory
            for `config` (the record's `from_arguments`).
    """

    read: Callable[[str, dict[str, Any], ConvertedArguments, bool], ConvertedModel]
    write: Callable[[ConvertedModel, dict[str, Any], str, bool], list[str]] | None = None


# Architecture name (`kbert.models.registry.ARCHITECTURES`) -> its converter.
CONVERTERS: dict[str, HuggingFaceConverter] = {
    "bert": HuggingFaceConverter(read_huggingface_bert),
    "modernbert": HuggingFaceConverter(read_huggingface_modernbert, write_huggingface_modernbert),
}


def load_huggingface(hf_dir: str, ignore_unknown: bool = False) -> ConvertedModel:
    """Reads a Hugging Face BERT or ModernBERT directory (config, safetensors, tokenizer).

    The architecture is the one whose record names the `config.json`'s
    `model_type` (BERT for a file with another or none, whose key map then
    names the `model_type` it cannot convert). A BERT's encoder takes its
    activation and LayerNorm epsilon from `config.json` (`hidden_act: gelu`
    is the exact GELU), heads come along when the file has them, the
    vocabulary is `vocab.txt` or `tokenizer.json`'s, and a
    sentence-transformers directory also gives its pooling
    (`kbert.checkpoints.huggingface_bert`); a ModernBERT is a
    `ModernBertEncoder`, its `ModernBertPretrainer` when the file has the
    masked-LM head, and its `tokenizer.json`
    (`kbert.checkpoints.huggingface_modernbert`).

    Args:
        hf_dir: str. A local directory as `save_pretrained` of `transformers`
            writes it (or a Hub snapshot).
        ignore_unknown: bool. Convert even if there are tensors kbert doesn't
            know (such as a classifier head).

    Returns:
        A `ConvertedModel`.

    Raises:
        FileNotFoundError: no such directory.
        ValueError: a config setting kbert cannot reproduce, or tensors that
            do not fit (named).

    Example:

    >>> converted = kbert.checkpoints.load_huggingface(kbert.checkpoints.minilm_hf_dir())
    >>> converted.encoder.activation
    'gelu_exact'
    """
    if not os.path.isdir(hf_dir):
        raise FileNotFoundError(f"Hugging Face model directory not found: {hf_dir}")
    config_path = os.path.join(hf_dir, "config.json")
    config = read_json(config_path, "Hugging Face config.json")
    architecture = hugging_face_architecture(config.get("model_type"))
    arguments = architecture.hugging_face.to_arguments(config, config_path)
    return CONVERTERS[architecture.name].read(hf_dir, config, arguments, ignore_unknown)


def save_huggingface(converted: ConvertedModel, output_dir: str,
                     overwrite: bool = False) -> list[str]:
    """Writes a kbert model as a Hugging Face directory `transformers` loads (`--to=hf`).

    The encoder's architecture's record maps the config
    (`Architecture.hugging_face.from_arguments`) and its converter writes
    the directory, atomically: for ModernBERT `config.json`,
    `model.safetensors` and the `tokenizer.json`.

    Args:
        converted: `ConvertedModel`, such as `kbert.checkpoints.load_kbert(dir)`.
        output_dir: str. Must not exist unless `overwrite`.
        overwrite: bool. Replace an existing directory. Defaults to False.

    Returns:
        Notes for the user (what was left out).

    Raises:
        ValueError: the architecture has no Hugging Face writer.

    Example:

    >>> save_huggingface(kbert.checkpoints.load_kbert("modernbert/"), "hf_out/")
    """
    architecture = architecture_of(converted.encoder)
    converter = CONVERTERS.get(architecture.name)
    if converter is None or converter.write is None or architecture.hugging_face is None:
        writable = [name for name, c in CONVERTERS.items()
                    if c.write is not None and name in ARCHITECTURES]
        raise ValueError(
            f"--to=hf writes {', '.join(writable)} models; {converted.source or 'the source'} "
            f"is a {type(converted.encoder).__name__} ({architecture.name}): use --to=kbert, "
            "or for BERT --to=bert_tf1 or --to=keras_hub.")
    pretrainer = converted.pretrainer
    config = architecture.hugging_face.from_arguments(
        converted.encoder.get_config(), pretrainer.get_config() if pretrainer is not None else None)
    return converter.write(converted, config, output_dir, overwrite)
