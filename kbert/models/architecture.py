"""`Architecture`: what kbert's generic code knows of an encoder architecture, as one record.

`kbert.models.registry.ARCHITECTURES` holds one record per architecture;
checkpoints (`load_encoder`, `load_pretrainer`, the Hugging Face converter
dispatch), `kbert-convert --to=hf` and gin (`kbert.configurables`) read it.
An architecture's own folder (`kbert/models/<arch>/`) holds the classes and
the config key maps the record points at: pure functions over dicts, no file
I/O (reading and writing files is `kbert.checkpoints`').
"""

from __future__ import annotations

import dataclasses
from typing import Any
from typing import Callable
from typing import NamedTuple


class ConvertedArguments(NamedTuple):
    """What a Hugging Face `config.json` says of a kbert model.

    Attributes:
        encoder: dict. The encoder class's keyword arguments.
        pretrainer: dict. The pre-trainer's own keyword arguments (beside the
            encoder), for a file with a pre-training head.
        notes: list of str. What the mapping had to decide, for the user.
    """

    encoder: dict[str, Any]
    pretrainer: dict[str, Any]
    notes: list[str]


@dataclasses.dataclass(frozen=True)
class HuggingFaceConfig:
    """How an architecture's Hugging Face `config.json` maps onto kbert's arguments (pure dicts).

    Attributes:
        model_types: tuple of str. The `model_type`s of Hugging Face
            `config.json` files this architecture reads, e.g. `("bert",)`.
        to_arguments: `(config, source) -> ConvertedArguments`: a parsed
            `config.json` (`source` names it in errors) to kbert arguments;
            raises ValueError naming every setting kbert cannot reproduce.
        from_arguments: `(encoder_config, pretrainer_config) -> dict` or None:
            an encoder's and (or None) its pre-trainer's `get_config()` to a
            `config.json` dict, for architectures `kbert-convert --to=hf`
            writes.

    Example:

    >>> HuggingFaceConfig(("bert",), to_arguments=bert_config.hf_arguments)
    """

    model_types: tuple[str, ...]
    to_arguments: Callable[[dict[str, Any], str], ConvertedArguments]
    from_arguments: Callable[[dict[str, Any], dict[str, Any] | None], dict[str, Any]] | None = None


@dataclasses.dataclass(frozen=True)
class Architecture:
    """One encoder architecture: its name, classes and file mappings, in one place.

    Attributes:
        name: str. The name pre-trained directories record (`model_type` in
            `bert_config.json`; BERT's files have none).
        encoder: type. The encoder class (a `kbert.models.Encoder`).
        pretrainer: type. The pre-trainer `kbert.checkpoints.load_pretrainer`
            and `kbert-pretrain --init_checkpoint` build over the encoder, e.g.
            `BertPretrainer` (which pre-trains any encoder).
        head_variants: tuple of dicts. Pre-trainer arguments a directory's
            `pretrainer.weights.h5` may have been saved with, most common
            first (`bert_config.json` records the encoder, not the heads'
            switches; the weights load only into the matching structure, so
            they pick). Defaults to `({},)`.
        hugging_face: `HuggingFaceConfig` or None. Its Hugging Face
            `model_type`s and config key map, for an architecture
            `kbert-convert` converts (the converter itself is
            `kbert.checkpoints.huggingface.CONVERTERS[name]`). Defaults to None.

    Example:

    >>> Architecture("bert", BertEncoder, BertPretrainer,
    ...              hugging_face=bert_config.HUGGING_FACE)
    """

    name: str
    encoder: type
    pretrainer: type
    head_variants: tuple[dict[str, Any], ...] = ({},)
    hugging_face: HuggingFaceConfig | None = None
