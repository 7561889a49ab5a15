"""A linear-chain CRF over per-token scores: sequence log-likelihood and Viterbi decoding.

No maintained Keras 3 CRF exists (tensorflow-addons 0.23 fails to import on
Keras 3, tf2crf and keras-crf depend on it, and keras-hub has none), so the
forward algorithm and Viterbi are written here with plain TF ops: `tf.scan`
over time steps, which XLA compiles and TF Serving runs (no custom ops).

Sequences are left-aligned: a row's first `length` steps are real and the
rest padding (`compact` moves scattered positions, such as each word's first
wordpiece, to the left).
"""

from __future__ import annotations

from typing import Sequence

import keras
import tensorflow as tf

# Added to the score of a forbidden transition: exp(-1e4) is 0 in float32, and
# a finite value keeps the forward algorithm free of inf - inf.
FORBIDDEN = -1e4


# Tag schemes by the prefixes their tags carry (`O` and unprefixed tags aside).
# Prefixes that must be continued by the same type (`open`) and prefixes that
# continue an entity (`inside`): IOB2's `I-X` follows `B-X` or `I-X`; IOBES's
# `B-X` and `I-X` go on with `I-X` or `E-X` (BILOU: `L-X`).
TAG_SCHEMES = {
    "IOB2": {"prefixes": {"B", "I"}, "open": set(), "inside": {"I"}},
    "IOBES": {"prefixes": {"B", "I", "E", "S"}, "open": {"B", "I"}, "inside": {"I", "E"}},
    "BILOU": {"prefixes": {"B", "I", "L", "U"}, "open": {"B", "I"}, "inside": {"I", "L"}},
    "plain": {"prefixes": set(), "open": set(), "inside": set()},
}


def split_tag(tag: str) -> tuple[str, str]:
    """A tag's scheme prefix and entity type: `B-PER` -> `("B", "PER")`, `NN` -> `("", "NN")`.

    Args:
        tag: str.

    Returns:
        `(prefix, type)`: the prefix is one of `BIESLU` or `""`; `O` is `("", "O")`.
    """
    if len(tag) > 2 and tag[1] == "-" and tag[0] in "BIESLU":
        return tag[0], tag[2:]
    return "", tag


def tag_scheme(label_names: Sequence[str]) -> str:
    """The scheme a tag set follows: `IOB2`, `IOBES`, `BILOU` or `plain` (no prefixes).

    `B-`/`I-` tags are IOB2 (an IOB1 file has the same tags; its sequences,
    not its tag set, tell them apart); `E-`/`S-` make IOBES and `L-`/`U-` BILOU
    (spaCy's). Tags without a prefix (`O`, or part-of-speech tags) fit any scheme.

    Args:
        label_names: tag names.

    Returns:
        str, a key of `TAG_SCHEMES`.

    Raises:
        ValueError: the prefixes mix two schemes (`E-` with `L-`); the message names them.

    Example:

    >>> tag_scheme(["O", "B-PER", "I-PER"]), tag_scheme(["O", "U-PER"]), tag_scheme(["NN", "VB"])
    ('IOB2', 'BILOU', 'plain')
    """
    prefixes = {split_tag(name)[0] for name in label_names} - {""}
    for scheme, rules in TAG_SCHEMES.items():
        if prefixes <= rules["prefixes"] and (prefixes or scheme == "plain"):
            return scheme
    raise ValueError(f"the tags' prefixes {sorted(prefixes)} mix tag schemes; use one of "
                     "IOB2 (B-, I-), IOBES (B-, I-, E-, S-) or BILOU (B-, I-, L-, U-).")


def tag_transitions(label_names: Sequence[str], scheme: str | None = None
                    ) -> tuple[list[bool], list[list[bool]], list[bool]]:
    """The starts, transitions and ends a tag scheme allows.

    IOB2: `I-X` only after `B-X` or `I-X`, never first. IOBES (and BILOU, with
    `L-`/`U-` for `E-`/`S-`): after `B-X` or `I-X` only `I-X` or `E-X`; `I-X`
    and `E-X` only after `B-X` or `I-X`; never first `I-`/`E-`, never last
    `B-`/`I-`. Plain tags (no prefixes) allow everything. `O` and unprefixed
    tags may follow anything a finished entity may.

    Args:
        label_names: tag names in logit order.
        scheme: str or None. A key of `TAG_SCHEMES`; None finds it (`tag_scheme`).

    Returns:
        `(allowed_starts, allowed_transitions, allowed_ends)`: `num_tags`
        bools, a `[from][to]` list of lists of bools, `num_tags` bools.

    Example:

    >>> starts, transitions, ends = tag_transitions(["O", "B-X", "E-X", "S-X"])
    >>> starts, ends
    ([True, True, False, True], [True, False, True, True])
    """
    rules = TAG_SCHEMES[scheme or tag_scheme(label_names)]
    tags = [split_tag(name) for name in label_names]

    def allowed(previous: tuple[str, str] | None, tag: tuple[str, str] | None) -> bool:
        opened = previous is not None and previous[0] in rules["open"]
        inside = tag is not None and tag[0] in rules["inside"]
        if not (opened or inside):
            return True
        # An entity goes on: from its `B-` or `I-` to its own type's inside tag.
        return (previous is not None and previous[0] in ("B", "I") and inside
                and previous[1] == tag[1])

    return ([allowed(None, tag) for tag in tags],
            [[allowed(previous, tag) for tag in tags] for previous in tags],
            [allowed(tag, None) for tag in tags])


def bio_transitions(label_names: Sequence[str]) -> tuple[list[bool], list[list[bool]]]:
    """The transitions a BIO (IOB2) tag set allows (`tag_transitions` with `IOB2`).

    `I-X` may only follow `B-X` or `I-X`, and may not start a sentence; every
    other tag (`O`, `B-*`, or a name without a `B-`/`I-` prefix) may follow
    anything and start a sentence.

    Args:
        label_names: tag names in logit order, e.g. `["O", "B-PER", "I-PER"]`.

    Returns:
        `(allowed_starts, allowed_transitions)`: a list of `num_tags` bools,
        and a `[from][to]` list of lists of bools.

    Example:

    >>> bio_transitions(["O", "B-PER", "I-PER"])
    ([True, True, False], [[True, True, False], [True, True, True], [True, True, True]])
    """
    starts, transitions, _ = tag_transitions(label_names, "IOB2")
    return starts, transitions


def first_forbidden(tags: Sequence[str], label_names: Sequence[str],
                    scheme: str | None = None) -> int | None:
    """The index of the first tag a scheme's transitions forbid, or None.

    Args:
        tags: one sentence's tag sequence.
        label_names: the tag set (`tag_transitions`).
        scheme: str or None, as for `tag_transitions`.

    Returns:
        int or None: the position of the first forbidden tag (`len(tags)` when
        the sentence may not end on its last tag).

    Example:

    >>> first_forbidden(["O", "I-PER"], ["O", "B-PER", "I-PER"])
    1
    """
    starts, transitions, ends = tag_transitions(label_names, scheme)
    index = {name: i for i, name in enumerate(label_names)}
    ids = [index[tag] for tag in tags]
    for position, tag in enumerate(ids):
        if not (transitions[ids[position - 1]][tag] if position else starts[tag]):
            return position
    return len(ids) if ids and not ends[ids[-1]] else None


def compact(values: tf.Tensor, keep: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Moves the kept positions of each row to its left, in order.

    Args:
        values: `[batch, time, ...]` tensor.
        keep: `[batch, time]` bool or 0/1 tensor: the positions in the sequence.

    Returns:
        `(compacted, lengths)`: `values` with each row's kept positions first
        (the rest follow, to be ignored) and int32 `[batch]` counts.

    Example:

    >>> compact(tf.constant([[5, 6, 7]]), tf.constant([[0, 1, 1]]))[0].numpy()
    array([[6, 7, 5]], dtype=int32)
    """
    keep = tf.cast(keep, tf.int32)
    order = tf.argsort(1 - keep, axis=1, stable=True)
    return tf.gather(values, order, batch_dims=1), tf.reduce_sum(keep, axis=1)


def _padded(values: tf.Tensor) -> tf.Tensor:
    # One more (padding) step, so that rows of zero steps still have a first one.
    paddings = [[0, 0], [0, 1]] + [[0, 0]] * (len(values.shape) - 2)
    return tf.pad(values, paddings)


def crf_log_likelihood(emissions, tags, lengths, starts, transitions, ends) -> tf.Tensor:
    """log p(tags | emissions) of each sequence under a linear-chain CRF.

    Args:
        emissions: float `[batch, time, num_tags]` per-step scores.
        tags: int `[batch, time]` gold tags (padding steps are ignored).
        lengths: int `[batch]` real steps per row; a row of length 0 scores 0.
        starts: float `[num_tags]` score of starting with each tag.
        transitions: float `[num_tags, num_tags]` score of `from -> to`.
        ends: float `[num_tags]` score of ending with each tag.

    Returns:
        float32 `[batch]` log-likelihoods.

    Example:

    >>> crf_log_likelihood(tf.zeros([1, 2, 3]), tf.constant([[0, 1]]), tf.constant([2]),
    ...                    tf.zeros([3]), tf.zeros([3, 3]), tf.zeros([3])).numpy()
    array([-2.1972246], dtype=float32)
    """
    emissions = _padded(tf.cast(emissions, tf.float32))
    tags = _padded(tf.cast(tags, tf.int32))
    lengths = tf.cast(lengths, tf.int32)
    mask = tf.sequence_mask(lengths, tf.shape(emissions)[1])
    return (_sequence_score(emissions, tags, lengths, mask, starts, transitions, ends)
            - _log_partition(emissions, lengths, mask, starts, transitions, ends))


def _sequence_score(emissions, tags, lengths, mask, starts, transitions, ends):
    maskf = tf.cast(mask, tf.float32)
    safe_tags = tf.where(mask, tags, 0)
    unary = tf.reduce_sum(tf.gather(emissions, safe_tags, batch_dims=2) * maskf, axis=1)
    pairs = tf.gather_nd(transitions, tf.stack([safe_tags[:, :-1], safe_tags[:, 1:]], axis=-1))
    binary = tf.reduce_sum(pairs * maskf[:, 1:], axis=1)
    first = tf.gather(starts, safe_tags[:, 0])
    last = tf.gather(ends, tf.gather(safe_tags, tf.maximum(lengths - 1, 0), batch_dims=1))
    return tf.where(lengths > 0, unary + binary + first + last, 0.0)


def _log_partition(emissions, lengths, mask, starts, transitions, ends):
    steps = tf.transpose(emissions, [1, 0, 2])
    step_mask = tf.transpose(mask)

    def forward(alpha, step):
        scores, real = step
        # alpha[b, from] + transitions[from, to], summed out over `from`.
        new = tf.reduce_logsumexp(alpha[:, :, None] + transitions[None], axis=1) + scores
        return tf.where(real[:, None], new, alpha)

    alpha = tf.scan(forward, (steps[1:], step_mask[1:]), initializer=starts + steps[0])
    final = tf.concat([(starts + steps[0])[None], alpha], axis=0)[-1]
    return tf.where(lengths > 0, tf.reduce_logsumexp(final + ends, axis=1), 0.0)


def viterbi_decode(emissions, lengths, starts, transitions, ends) -> tf.Tensor:
    """The highest-scoring tag sequence of each row (Viterbi with back-tracking).

    Args:
        emissions: float `[batch, time, num_tags]` per-step scores.
        lengths: int `[batch]` real steps per row.
        starts, transitions, ends: the CRF's scores, as in `crf_log_likelihood`.

    Returns:
        int32 `[batch, time]` tags; 0 on padding steps.

    Example:

    >>> viterbi_decode(tf.constant([[[0., 1.], [2., 0.]]]), tf.constant([2]),
    ...                tf.zeros([2]), tf.zeros([2, 2]), tf.zeros([2])).numpy()
    array([[1, 0]], dtype=int32)
    """
    time = tf.shape(emissions)[1]
    emissions = _padded(tf.cast(emissions, tf.float32))
    lengths = tf.cast(lengths, tf.int32)
    num_tags = tf.shape(emissions)[2]
    mask = tf.sequence_mask(lengths, tf.shape(emissions)[1])
    steps = tf.transpose(emissions, [1, 0, 2])
    step_mask = tf.transpose(mask)
    batch = tf.shape(emissions)[0]
    stay = tf.tile(tf.range(num_tags)[None], [batch, 1])

    def forward(carry, step):
        delta, _ = carry
        scores, real = step
        candidates = delta[:, :, None] + transitions[None]
        # On padding steps the best path stays where it is.
        pointer = tf.where(real[:, None], tf.argmax(candidates, axis=1, output_type=tf.int32), stay)
        new = tf.where(real[:, None], tf.reduce_max(candidates, axis=1) + scores, delta)
        return new, pointer

    delta0 = starts + steps[0]
    deltas, pointers = tf.scan(forward, (steps[1:], step_mask[1:]), initializer=(delta0, stay))
    final = tf.concat([delta0[None], deltas], axis=0)[-1]
    last = tf.argmax(final + ends, axis=1, output_type=tf.int32)

    def back(tag, pointer):
        return tf.gather(pointer, tag, batch_dims=1)

    earlier = tf.scan(back, pointers, initializer=last, reverse=True)
    tags = tf.transpose(tf.concat([earlier, last[None]], axis=0))
    return tf.where(mask, tags, 0)[:, :time]


@keras.saving.register_keras_serializable(package="kbert")
class LinearChainCrf(keras.layers.Layer):
    """Learned start, transition and end scores of a linear-chain CRF.

    The layer passes its input (per-token scores) through unchanged, so that
    a functional model holds and saves its weights; training calls
    `log_likelihood` on the model's output and prediction calls `decode`.
    Forbidden transitions get `FORBIDDEN` added, so they are never decoded
    and carry no probability. With `learning_rate_multiplier=m` the scores are
    `m * variable`: under Adam-type optimizers, whose steps do not depend on
    the gradient's scale, the scores then move `m` times faster than the
    encoder's weights (fine-tuned BERT gains little from a CRF otherwise),
    without a per-variable optimizer.

    Args:
        num_tags: int. Number of tags.
        allowed_starts: list of `num_tags` bools or None (all allowed).
        allowed_transitions: `[from][to]` list of lists of bools or None.
        learning_rate_multiplier: float. Defaults to 1.
        allowed_ends: list of `num_tags` bools or None (all allowed): the tags
            a sequence may end with (IOBES's `E-`, `S-`, `O`).
        **kwargs: passed to `keras.layers.Layer`.

    Example:

    >>> starts, transitions, ends = kbert.layers.tag_transitions(["O", "B-X", "I-X"])
    >>> crf = kbert.layers.LinearChainCrf(3, starts, transitions, allowed_ends=ends)
    >>> crf.build((None, None, 3))
    >>> crf.decode(tf.zeros([1, 2, 3]), tf.constant([2]))

    Reference:
        - [Lafferty et al., 2001](https://repository.upenn.edu/cis_papers/159/)
    """

    def __init__(self, num_tags: int, allowed_starts=None, allowed_transitions=None,
                 learning_rate_multiplier: float = 1.0, allowed_ends=None, **kwargs):
        super().__init__(**kwargs)
        self.num_tags = int(num_tags)
        self.allowed_starts = None if allowed_starts is None else [bool(a) for a in allowed_starts]
        self.allowed_transitions = (None if allowed_transitions is None
                                    else [[bool(a) for a in row] for row in allowed_transitions])
        self.allowed_ends = None if allowed_ends is None else [bool(a) for a in allowed_ends]
        for name in ("allowed_starts", "allowed_ends"):
            allowed = getattr(self, name)
            if allowed is not None and len(allowed) != self.num_tags:
                raise ValueError(f"{name} has {len(allowed)} entries; the CRF has "
                                 f"{self.num_tags} tags.")
        if self.allowed_transitions is not None and (
                len(self.allowed_transitions) != self.num_tags
                or any(len(row) != self.num_tags for row in self.allowed_transitions)):
            raise ValueError(f"allowed_transitions must be {self.num_tags}x{self.num_tags}.")
        if learning_rate_multiplier <= 0:
            raise ValueError(f"learning_rate_multiplier={learning_rate_multiplier}; it must be > 0.")
        self.learning_rate_multiplier = float(learning_rate_multiplier)

    def build(self, input_shape):
        zeros = keras.initializers.Zeros()
        self.start_variable = self.add_weight(shape=(self.num_tags,), initializer=zeros,
                                              dtype="float32", name="starts")
        self.transition_variable = self.add_weight(shape=(self.num_tags, self.num_tags),
                                                   initializer=zeros, dtype="float32",
                                                   name="transitions")
        self.end_variable = self.add_weight(shape=(self.num_tags,), initializer=zeros,
                                            dtype="float32", name="ends")
        self.built = True

    def call(self, inputs):
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def scores(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """`(starts, transitions, ends)` as used, with the forbidden ones lowered."""
        scale = self.learning_rate_multiplier
        starts = scale * tf.convert_to_tensor(self.start_variable)
        transitions = scale * tf.convert_to_tensor(self.transition_variable)
        if self.allowed_starts is not None:
            starts += tf.where(tf.constant(self.allowed_starts), 0.0, FORBIDDEN)
        if self.allowed_transitions is not None:
            transitions += tf.where(tf.constant(self.allowed_transitions), 0.0, FORBIDDEN)
        ends = scale * tf.convert_to_tensor(self.end_variable)
        if self.allowed_ends is not None:
            ends += tf.where(tf.constant(self.allowed_ends), 0.0, FORBIDDEN)
        return starts, transitions, ends

    def log_likelihood(self, emissions, tags, lengths) -> tf.Tensor:
        """float32 `[batch]` log p(tags | emissions) (see `crf_log_likelihood`)."""
        return crf_log_likelihood(emissions, tags, lengths, *self.scores())

    def decode(self, emissions, lengths) -> tf.Tensor:
        """int32 `[batch, time]` Viterbi tags (see `viterbi_decode`)."""
        return viterbi_decode(emissions, lengths, *self.scores())

    def get_config(self):
        config = super().get_config()
        config.update({"num_tags": self.num_tags, "allowed_starts": self.allowed_starts,
                       "allowed_transitions": self.allowed_transitions,
                       "learning_rate_multiplier": self.learning_rate_multiplier,
                       "allowed_ends": self.allowed_ends})
        return config
