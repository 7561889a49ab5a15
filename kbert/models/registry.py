"""`ENCODERS`: the one list of encoder architectures, by the name pre-trained directories record.

A pre-trained directory's `bert_config.json` names its architecture in a
`model_type` key (as Hugging Face's `config.json` does); a file without one
is BERT, as every directory written before there was a second architecture.
Adding an architecture is a backbone module under `kbert/models/<arch>/`
keeping the `kbert.models.encoder.Encoder` contract, plus one line here.
"""

from __future__ import annotations

from kbert.models.bert_encoder import BertEncoder
from kbert.models.bert_pretrainer import BertPretrainer
from kbert.models.modernbert import ModernBertEncoder
from kbert.models.modernbert import ModernBertPretrainer

# The architecture of a directory whose config has no `model_type`.
DEFAULT_ARCHITECTURE = "bert"

# Registry: architecture name -> encoder class.
ENCODERS: dict[str, type] = {
    "bert": BertEncoder,
    "modernbert": ModernBertEncoder,
}

# Architecture name -> its pre-trainer class: what `kbert.checkpoints.load_pretrainer`
# builds over a pre-trained directory's encoder (`BertPretrainer` for one not listed).
PRETRAINERS: dict[str, type] = {
    "bert": BertPretrainer,
    "modernbert": ModernBertPretrainer,
}


def get_encoder_class(name: str, source: str = "model_type") -> type:
    """The encoder class registered as `name`.

    Args:
        name: str. A key of `ENCODERS`, e.g. `bert`.
        source: str. Where the name came from, named in the error.

    Returns:
        The encoder class.

    Raises:
        ValueError: no architecture has that name; the message lists them.

    Example:

    >>> kbert.models.get_encoder_class("bert")
    <class 'kbert.models.bert_encoder.BertEncoder'>
    """
    if name not in ENCODERS:
        raise ValueError(f"{source}: model_type={name!r} is not a kbert encoder architecture; "
                         f"expected one of {tuple(ENCODERS)} (kbert.models.registry.ENCODERS).")
    return ENCODERS[name]


def encoder_architecture(encoder) -> str:
    """The registry name of an encoder's class (the exact class: a subclass registers itself).

    Args:
        encoder: an encoder, or an encoder class.

    Returns:
        Its key in `ENCODERS`.

    Raises:
        ValueError: the class is not registered.

    Example:

    >>> kbert.models.encoder_architecture(kbert.models.BertEncoder(...))
    'bert'
    """
    cls = encoder if isinstance(encoder, type) else type(encoder)
    for name, registered in ENCODERS.items():
        if registered is cls:
            return name
    raise ValueError(f"{cls.__name__} is not a registered encoder architecture; add it to "
                     f"kbert.models.registry.ENCODERS (registered: {tuple(ENCODERS)}).")
