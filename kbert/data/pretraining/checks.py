"""Checks pre-training settings against the data: its sidecar, or its first record.

The data's sidecar (`<file>.meta.json`, see `metadata.py`) records how the data
was made. A run whose `max_seq_length`, `max_predictions_per_seq`, masking or
tokenizer disagree with it would fail deep inside the first step (a parse
error naming no file), at the first evaluation, or, worse, train on the wrong
ids; these checks say so first, naming the file, both values and the fix.

`run_pretraining` calls `check_pretraining_data` and `check_data_tokenizer`
(for `--input_file` and `--eval_input_file`) before it builds anything, and
`check_data_vocabulary` and `sentence_task_note` once its model exists;
`pretraining_dataset` reads the data on its own and calls `check_masking_mode`,
`check_recorded_lengths` and `check_recorded_masking` itself. Each comparison
is written once here.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from kbert.data.packing import PackingConfig
from kbert.data.pretraining.instances import MASKING_MODES
from kbert.data.pretraining.metadata import read_pretraining_metadata
from kbert.data.pretraining.metadata import recorded_masking
from kbert.data.pretraining.metadata import recorded_tokenizer
from kbert.data.pretraining.tfrecord_framing import count_records
from kbert.data.tokenizers.identity import TokenizerIdentity
from kbert.data.tokenizers.wordpiece_tokenizer import WordpieceTokenizer


def check_pretraining_data(input_file: str | list[str], max_seq_length: int,
                           max_predictions_per_seq: int, masking: str
                           ) -> tuple[list[str], dict[str, Any] | None]:
    """Lists the data files and checks a run's lengths and masking against them.

    With a sidecar, it must record the same `max_seq_length`,
    `max_predictions_per_seq` (static data) and masking, and each file must
    have the size its own sidecar records; a file without one has its first
    record's lengths and features checked.

    Args:
        input_file: str or list of str. TFRecord files or globs, comma-separated.
        max_seq_length: int. The run's `run_pretraining.max_seq_length`.
        max_predictions_per_seq: int. The run's `run_pretraining.max_predictions_per_seq`.
        masking: str. `"static"` or `"dynamic"`.

    Returns:
        `(files, metadata)`: the data files, and the sidecar as
        `read_pretraining_metadata` returns it (None without one).

    Raises:
        FileNotFoundError: `input_file` matches no files.
        ValueError: naming the setting, the file, both values and the fix.

    Example:

    >>> files, metadata = check_pretraining_data("data/*.tfrecord", 128, 20, "static")
    """
    files = list_input_files(input_file)
    metadata = read_pretraining_metadata(files)
    check_recorded_lengths(metadata, max_seq_length, max_predictions_per_seq,
                           data_file=files[0])
    check_masking_mode(masking)
    check_recorded_masking(metadata, masking)
    for path in files:
        own = read_pretraining_metadata([path])
        if own:
            check_recorded_size(path, own)
        else:
            check_first_record(path, max_seq_length, max_predictions_per_seq, masking)
    return files, metadata


def check_recorded_size(path: str, metadata: dict[str, Any]) -> None:
    """Refuses a data file whose size or record count differs from what its sidecar recorded.

    A copy cut short (a full disk, an interrupted `gsutil cp`) would otherwise
    train without a word until the reader reached the cut, or never, if the
    run stopped before it. Sidecars record `bytes_in_file` (a `stat`); older
    ones only `num_instances_in_file` (the records are counted from their
    headers).

    Args:
        path: str. A data file.
        metadata: dict. Its own sidecar (`read_pretraining_metadata([path])`).

    Raises:
        ValueError: naming the file, the sidecar, both values and the fix.
    """
    where = metadata.get("sidecar", "its sidecar")
    fix = "the file was cut short or changed after it was written; copy it again or regenerate it"
    size = tf.io.gfile.stat(path).length
    if "bytes_in_file" in metadata:
        if size != metadata["bytes_in_file"]:
            raise ValueError(f"{path} is {size} bytes but {where} records "
                             f"bytes_in_file={metadata['bytes_in_file']}: {fix}.")
        return
    if "num_instances_in_file" in metadata:
        count, problem = count_records(path)
        if problem or count != metadata["num_instances_in_file"]:
            raise ValueError(f"{path} holds {count} whole records{f' ({problem})' if problem else ''}"
                             f" but {where} records num_instances_in_file="
                             f"{metadata['num_instances_in_file']}: {fix}.")


def list_input_files(input_file: str | list[str], flag: str = "--input_file") -> list[str]:
    """The TFRecord files of `--input_file` (comma-separated files or globs; sidecars skipped).

    Args:
        input_file: str or list of str. Files or globs, comma-separated.
        flag: str. The flag (or argument) named when nothing matches.

    Returns:
        list of str: the files, sorted within each pattern.

    Raises:
        FileNotFoundError: nothing matches; the message names the flag.
    """
    patterns = input_file if isinstance(input_file, (list, tuple)) else str(input_file).split(",")
    files = []
    for pattern in (p.strip() for p in patterns):
        if pattern:
            # Sidecars (`<file>.meta.json`) may match a glob like `data/*`.
            files += [f for f in sorted(tf.io.gfile.glob(pattern)) if not f.endswith(".json")]
    if not files:
        raise FileNotFoundError(
            f"{flag}={','.join(patterns) if isinstance(input_file, (list, tuple)) else input_file!r} "
            "matches no files; pass TFRecord files or globs made by tools/create_pretraining_data.py."
        )
    return files


def check_masking_mode(masking: str) -> None:
    """Raises ValueError unless `masking` is one of `MASKING_MODES`."""
    if masking not in MASKING_MODES:
        raise ValueError(f"masking={masking!r}; use one of {', '.join(MASKING_MODES)}.")


def check_recorded_lengths(metadata: dict[str, Any] | None, max_seq_length: int,
                           max_predictions_per_seq: int | None = None, *,
                           packing: PackingConfig | None = None,
                           data_file: str | None = None) -> None:
    """Refuses data whose sidecar records another `max_seq_length` or `max_predictions_per_seq`.

    The one comparison of a run's lengths with the sidecar's, worded for its
    caller: `run_pretraining` passes `data_file` (its first data file), and
    its messages name `<data_file>.meta.json` and the gin binding to pass;
    `pretraining_dataset` does not, and its messages name the sidecar read
    and the argument.

    Args:
        metadata: dict or None. `read_pretraining_metadata`'s result; None
            checks nothing.
        max_seq_length: int. The length read (and packed) at.
        max_predictions_per_seq: int or None. Checked too when given, unless
            the data is unmasked (`--masking=dynamic`: the run's setting then
            sizes the masks).
        packing: `PackingConfig` or None. Only words the message.
        data_file: str or None. See above.

    Raises:
        ValueError: naming the sidecar, both values and the fix.
    """
    if not metadata:
        return
    checked = [("max_seq_length", max_seq_length)]
    if max_predictions_per_seq is not None and recorded_masking(metadata) != "dynamic":
        checked.append(("max_predictions_per_seq", max_predictions_per_seq))
    for key, value in checked:
        recorded = metadata.get(key)
        if recorded is None or recorded == value:
            continue
        if data_file is not None:
            raise ValueError(
                f"run_pretraining.{key}={value} does not match {recorded} recorded in "
                f"{_sidecar_of(data_file)}; regenerate the data or pass "
                f"--gin_params='run_pretraining.{key} = {recorded}'."
            )
        where = metadata.get("sidecar", "the data's sidecar")
        doing = "packing rows of" if packing is not None else "reading with"
        raise ValueError(
            f"{doing} {key}={value}, but {where} records {key}={recorded}; pass {key}={recorded} "
            f"(run_pretraining.{key}) or regenerate the data with --{key}.")


def check_recorded_masking(metadata: dict[str, Any] | None, masking: str) -> None:
    """Refuses masked data read as unmasked (`masking="dynamic"`) and the other way round.

    Args:
        metadata: dict or None. `read_pretraining_metadata`'s result; None
            checks nothing.
        masking: str. `"static"` or `"dynamic"`.

    Raises:
        ValueError: naming the sidecar, both values and the fix.
    """
    if not metadata or recorded_masking(metadata) == masking:
        return
    where = metadata.get("sidecar", "the data's sidecar")
    what = ("holds unmasked instances (--masking=dynamic)" if masking == "static"
            else "holds instances masked by the data tool (--masking=static)")
    raise ValueError(
        f"masking={masking!r}, but {where} records masking={recorded_masking(metadata)!r}: "
        f"the data {what}; pass masking={recorded_masking(metadata)!r} "
        f"(run_pretraining.masking = \"{recorded_masking(metadata)}\") or regenerate the data "
        f"with --masking={masking}.")


def check_first_record(path: str, max_seq_length: int, max_predictions_per_seq: int,
                       masking: str = "static") -> None:
    """Without a sidecar, reads one record to check its lengths against the settings.

    google-research/bert's tool writes no sidecar; a length mismatch would
    otherwise surface as a parse error deep in the first step, naming no file.

    Args:
        path: str. A data file without a sidecar.
        max_seq_length: int. Must be the length of `input_ids`.
        max_predictions_per_seq: int. Must be the length of
            `masked_lm_positions` (static masking).
        masking: str. `"dynamic"` refuses records that are already masked.

    Raises:
        ValueError: naming the file, the feature, both lengths and the fix.
    """
    try:
        record = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except tf.errors.OpError as e:
        raise named_data_error([path], e) from None
    if record is None:
        raise ValueError(f"{path} holds no records; regenerate it or leave it out of --input_file.")
    example = tf.train.Example.FromString(record.numpy())
    lengths = {name: len(feature.int64_list.value)
               for name, feature in example.features.feature.items()}
    if masking == "dynamic" and "masked_lm_positions" in lengths:
        raise ValueError(
            f"{path}: run_pretraining.masking=\"dynamic\" but the records are already masked "
            "(they have masked_lm_positions; the file has no .meta.json sidecar to say so); use "
            "run_pretraining.masking = \"static\" or data from create_pretraining_data "
            "--masking=dynamic.")
    checks = [("input_ids", "max_seq_length", max_seq_length)]
    if masking == "static":
        checks.append(("masked_lm_positions", "max_predictions_per_seq", max_predictions_per_seq))
    for feature, key, value in checks:
        if feature not in lengths:
            raise ValueError(f"{path}: the first record has no {feature!r} feature; is it "
                             "pre-training data from tools/create_pretraining_data.py?")
        if lengths[feature] != value:
            raise ValueError(
                f"{path}: records have {feature} of length {lengths[feature]} but "
                f"run_pretraining.{key}={value} (the file has no .meta.json sidecar to say so); "
                f"pass --gin_params='run_pretraining.{key} = {lengths[feature]}'.")


def check_data_vocabulary(metadata: dict[str, Any] | None, data_file: str, vocabulary_size: int,
                          next_sentence: bool, encoder_name: str = "BertEncoder") -> None:
    """Checks the model's vocabulary size and NSP head against the sidecar.

    Which tokenizer the data was made with is `check_data_tokenizer`'s
    question, asked before the model is built.

    Args:
        metadata: dict or None. `read_pretraining_metadata`'s result; None
            checks nothing.
        data_file: str. The run's first data file (named in the messages).
        vocabulary_size: int. The encoder's embedding rows.
        next_sentence: bool. Whether the pre-trainer has an NSP head (it
            then needs data with `next_sentence_labels`).
        encoder_name: str. The encoder's class, as gin binds it (named in
            the message). Defaults to "BertEncoder".

    Raises:
        ValueError: naming the setting, the sidecar, both values and the fix.
    """
    if not metadata:
        return
    where = _sidecar_of(data_file)
    if "vocab_size" in metadata and metadata["vocab_size"] != vocabulary_size:
        raise ValueError(
            f"{encoder_name}.vocabulary_size={vocabulary_size} does not match vocab_size="
            f"{metadata['vocab_size']} recorded in {where}; pass --gin_params="
            f"'{encoder_name}.vocabulary_size = {metadata['vocab_size']}' or regenerate the data."
        )
    # The sidecar records the data tool's --next_sentence: "nsp" and "sop" data
    # carry next_sentence_labels, "none" data does not. An MLM-only model reads
    # either kind (the labels are not parsed; `sentence_task_note` says so); an
    # NSP head needs the labels.
    if next_sentence and metadata.get("next_sentence") in ("none", False):
        raise ValueError(
            f"BertPretrainer.next_sentence=True needs next_sentence_labels, but {where} records "
            f"next_sentence={metadata['next_sentence']!r} (data written with "
            "--next_sentence=none has none); pass --gin_params='BertPretrainer.next_sentence = "
            "False' for MLM-only training or regenerate the data with --next_sentence=nsp or sop."
        )


def sentence_task_note(metadata: dict[str, Any] | None, data_file: str,
                       next_sentence: bool) -> str | None:
    """A warning for sentence-pair data (NSP or SOP) read by a model without an NSP head.

    Such a model (ModernBERT's, ELECTRA's, BERT with `next_sentence = False`)
    trains on the masked tokens alone and never reads the labels, so the data
    is used, not refused: it may be what the user has. But its instances were
    laid out for the sentence task (`--next_sentence=nsp`: half of them join a
    segment to one from another document), which RoBERTa and ModernBERT
    train without: the note says what is ignored and how to make the data
    without it.

    Args:
        metadata: dict or None. The data's sidecar; None says nothing.
        data_file: str. The data's first file (named).
        next_sentence: bool. Whether the model has an NSP head.

    Returns:
        The warning line, or None (no sidecar, an NSP head, or data made with
        `--next_sentence=none`).
    """
    task = (metadata or {}).get("next_sentence")
    if next_sentence or task not in ("nsp", "sop"):
        return None
    layout = ("half of its instances join a segment to a random one from another document"
              if task == "nsp" else "half of its instances swap their two segments")
    return (f"warning: {_sidecar_of(data_file)} records next_sentence={task!r}, but the model "
            f"has no next-sentence head: its next_sentence_labels are ignored and it trains on "
            f"the masked tokens alone, while {layout}. For masked-LM-only pre-training "
            "(ModernBERT, RoBERTa, ELECTRA) make the data with tools/create_pretraining_data.py "
            "--next_sentence=none.")


def check_data_tokenizer(metadata: dict[str, Any] | None, data_file: str,
                         model: TokenizerIdentity | None, source: str,
                         flag: str = "--input_file") -> None:
    """Refuses data whose sidecar records another tokenizer than the model's, naming both.

    Tokenizers are compared by the hash of what their ids mean
    (`kbert.data.tokenizers.tokenizer_sha256`), so a vocabulary of the same
    size but other tokens (another model's, or one before `kbert-vocab
    extend`) is refused too: it would train the model on ids that mean other
    words, or fail at the first evaluation when an id passes the embedding.

    Args:
        metadata: dict or None. The data's sidecar; None (or one without a
            tokenizer record) checks nothing.
        data_file: str. The data's first file (its sidecar is named).
        model: `TokenizerIdentity` or None. The model's tokenizer; None
            checks nothing.
        source: str. Where `model` comes from, as the message names it
            (e.g. "--init_checkpoint=out/minilm", "--vocab_file").
        flag: str. The data's flag (`--input_file`, `--eval_input_file`).

    Raises:
        ValueError: naming the flag, the sidecar, both tokenizers and the fix.

    Example:

    >>> check_data_tokenizer(meta, "data/heldout.tfrecord",
    ...                      TokenizerIdentity.of_file("bpe/tokenizer.json"), "--vocab_file",
    ...                      flag="--eval_input_file")
    """
    recorded = recorded_tokenizer(metadata)
    if model is None or recorded is None or recorded.same_as(model):
        return
    option = "--tokenizer_file" if model.kind != WordpieceTokenizer.kind else "--vocab_file"
    fix = (f"make the data with tools/create_pretraining_data.py {option}={model.file}"
           if model.file else "make the data with the model's tokenizer")
    raise ValueError(
        f"{flag}: {_sidecar_of(data_file)} says the data was made with {recorded.describe()}, "
        f"but the model's tokenizer is {model.describe()}, from {source}: the same ids would "
        f"mean other tokens. {fix[0].upper() + fix[1:]}.")


def named_data_error(files: list[str], error: tf.errors.OpError,
                     flag: str = "--input_file") -> ValueError:
    """A clear error naming the corrupt or truncated file (and offset) of a data error.

    Args:
        files: list of str. The files that were read.
        error: the `tf.errors.OpError` reading them raised.
        flag: str. The flag that named them. Defaults to "--input_file".

    Returns:
        A ValueError naming the first file whose TFRecord framing is broken
        (and where), or saying that every file's framing checks out.
    """
    from kbert.data.pretraining.tfrecord_framing import find_framing_error

    cause = str(error.message if hasattr(error, "message") else error).splitlines()[0]
    for path in files:
        problem = find_framing_error(path)
        if problem is not None:
            offset, reason = problem
            return ValueError(
                f"{path}: corrupt or truncated TFRecord at byte {offset}: {reason}. Regenerate "
                "the file (e.g. it was copied while being written) or leave it out of "
                f"{flag}. (TensorFlow: {cause})")
    return ValueError(f"reading {flag} failed: {cause}; every file's TFRecord framing "
                      "checks out, so a record's contents may be bad.")


def _sidecar_of(data_file: str) -> str:
    return f"the data's sidecar ({data_file}.meta.json)"
