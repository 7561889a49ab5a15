"""`ARCHITECTURES`: one record per encoder architecture, by the name pre-trained directories record.

A pre-trained directory's `bert_config.json` names its architecture in a
`model_type` key (as Hugging Face's `config.json` does); a file without one
is BERT, as every directory written before there was a second architecture.
Adding an architecture is a folder `kbert/models/<arch>/` (its encoder
keeping the `kbert.models.encoder.Encoder` contract, its pre-trainer unless
`BertPretrainer` does, its config key maps) plus one line here; what the
record holds is `kbert.models.architecture.Architecture`.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping

from kbert.models.architecture import Architecture
from kbert.models.bert import BertEncoder
from kbert.models.bert import BertPretrainer
from kbert.models.bert import bert_config
from kbert.models.modernbert import ModernBertEncoder
from kbert.models.modernbert import ModernBertPretrainer
from kbert.models.modernbert import modernbert_config

# The architecture of a directory whose config has no `model_type`.
DEFAULT_ARCHITECTURE = "bert"

# Registry: architecture name -> its record, one line each. ModernBERT's
# released heads have no dense bias; a directory may hold one with it.
ARCHITECTURES: dict[str, Architecture] = {
    "bert": Architecture("bert", BertEncoder, BertPretrainer,
                         hugging_face=bert_config.HUGGING_FACE),
    "modernbert": Architecture("modernbert", ModernBertEncoder, ModernBertPretrainer,
                               head_variants=({}, {"dense_bias": True}),
                               hugging_face=modernbert_config.HUGGING_FACE),
}


class _RecordField(Mapping):
    """A read-only view of `ARCHITECTURES`: architecture name -> one field of its record."""

    def __init__(self, field: str) -> None:
        self._field = field

    def __getitem__(self, name: str) -> type:
        return getattr(ARCHITECTURES[name], self._field)

    def __iter__(self) -> Iterator[str]:
        return iter(ARCHITECTURES)

    def __len__(self) -> int:
        return len(ARCHITECTURES)

    def __repr__(self) -> str:
        return repr(dict(self))


# Architecture name -> encoder class, and -> pre-trainer class: views of the records.
ENCODERS: Mapping[str, type] = _RecordField("encoder")
PRETRAINERS: Mapping[str, type] = _RecordField("pretrainer")


def get_architecture(name: str, source: str = "model_type") -> Architecture:
    """The record of the architecture registered as `name`.

    Args:
        name: str. A key of `ARCHITECTURES`, e.g. `bert`.
        source: str. Where the name came from, named in the error.

    Returns:
        The `Architecture`.

    Raises:
        ValueError: no architecture has that name; the message lists them.

    Example:

    >>> kbert.models.get_architecture("modernbert").pretrainer.__name__
    'ModernBertPretrainer'
    """
    if name not in ARCHITECTURES:
        raise ValueError(f"{source}: model_type={name!r} is not a kbert encoder architecture; "
                         f"expected one of {tuple(ARCHITECTURES)} "
                         "(kbert.models.registry.ARCHITECTURES).")
    return ARCHITECTURES[name]


def get_encoder_class(name: str, source: str = "model_type") -> type:
    """The encoder class registered as `name`.

    Args:
        name: str. A key of `ARCHITECTURES`, e.g. `bert`.
        source: str. Where the name came from, named in the error.

    Returns:
        The encoder class.

    Raises:
        ValueError: no architecture has that name; the message lists them.

    Example:

    >>> kbert.models.get_encoder_class("bert")
    <class 'kbert.models.bert.bert_encoder.BertEncoder'>
    """
    return get_architecture(name, source).encoder


def architecture_of(encoder) -> Architecture:
    """The record of an encoder's class (the exact class: a subclass registers itself).

    Args:
        encoder: an encoder, or an encoder class.

    Returns:
        Its `Architecture`.

    Raises:
        ValueError: the class is not registered.

    Example:

    >>> kbert.models.architecture_of(encoder).head_variants
    ({},)
    """
    cls = encoder if isinstance(encoder, type) else type(encoder)
    for architecture in ARCHITECTURES.values():
        if architecture.encoder is cls:
            return architecture
    raise ValueError(f"{cls.__name__} is not a registered encoder architecture; add it to "
                     f"kbert.models.registry.ARCHITECTURES (registered: {tuple(ARCHITECTURES)}).")


def encoder_architecture(encoder) -> str:
    """The registry name of an encoder's class (the exact class: a subclass registers itself).

    Args:
        encoder: an encoder, or an encoder class.

    Returns:
        Its key in `ARCHITECTURES`.

    Raises:
        ValueError: the class is not registered.

    Example:

    >>> kbert.models.encoder_architecture(kbert.models.BertEncoder(...))
    'bert'
    """
    return architecture_of(encoder).name


def hugging_face_architecture(model_type: str | None) -> Architecture:
    """The architecture that reads Hugging Face `config.json` files of `model_type`.

    Args:
        model_type: str or None. The file's `model_type`.

    Returns:
        The record whose `hugging_face.model_types` names it; else the
        default architecture's (BERT), whose config map then names what it
        cannot convert, as for any other unsupported setting.

    Example:

    >>> kbert.models.hugging_face_architecture("modernbert").name
    'modernbert'
    """
    for architecture in ARCHITECTURES.values():
        if architecture.hugging_face and model_type in architecture.hugging_face.model_types:
            return architecture
    return ARCHITECTURES[DEFAULT_ARCHITECTURE]
