"""Writes a fine-tuning task's text inputs, without labels, as a pre-training corpus (TAPT).

Task-adaptive pre-training (Gururangan et al. 2020, "Don't Stop Pretraining")
continues pre-training on the task's own unlabelled text before fine-tuning.
This reads a split with the reader `kbert-finetune --task` uses and writes its
inputs in the pre-training data tool's corpus format: one sentence (or short
text) per line, a blank line between documents. Labels, scores, tags, answers
and relevance judgements are never written. What a document is depends on the
task (`Task.input_texts`): a GLUE example (one or two sentences), a CoNLL
sentence, a SQuAD paragraph and its questions, a similarity pair, a BEIR query
or corpus document. Repeated documents (a paragraph with many questions) are
written once. The file is written to a temporary name and renamed when complete.

Example:

    python tools/task_text.py --task=glue --task_name=SST-2 --data_dir=glue_data/SST-2 \
      --output_file=tapt/sst2.txt
    python tools/task_text.py --task=ner --data_dir=conll2003 --output_file=tapt/conll.txt
    python tools/task_text.py --task=squad --train_file=train-v1.1.json --output_file=tapt/squad.txt
    python tools/create_pretraining_data.py --input_file=tapt/sst2.txt \
      --output_file=tapt/sst2.tfrecord --vocab_file=minilm/vocab.txt --masking=dynamic ...

See docs/pretraining.md, "Continue pre-training on your domain".
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sys  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("task", None, "A kbert-finetune task with text inputs: glue, ner, squad, "
                    "similarity, retrieval or rerank.")
flags.DEFINE_string("task_name", None, "The data set of the task family, as for kbert-finetune "
                    "(--task=glue --task_name=SST-2).")
flags.DEFINE_string("data_dir", None, "The task's data folder, as for kbert-finetune.")
flags.DEFINE_string("train_file", None, "The task's training file (SQuAD JSON, pairs JSONL), "
                    "as for kbert-finetune.")
flags.DEFINE_string("predict_file", None, "The task's evaluation file, for --split=dev or test.")
flags.DEFINE_string("split", "train", "Which split's inputs: train (task-adaptive pre-training "
                    "uses the training inputs), dev or test.")
flags.DEFINE_string("output_file", None, "The corpus file to write.")


def task_documents(task: str, task_name: str | None, data_dir: str | None,
                   train_file: str | None, predict_file: str | None,
                   split: str = "train") -> list[list[str]]:
    """One split's text inputs as documents of lines, repeats dropped, no labels.

    Args:
        task: str. A key of `kbert.tasks.TASKS`.
        task_name, data_dir, train_file, predict_file: str or None. Where the
            data is, as `kbert-finetune`'s flags of those names.
        split: str. `train`, `dev` or `test`.

    Returns:
        list of documents, each a non-empty list of one-line strings.
    """
    from kbert.tasks import TaskData
    from kbert.tasks import get_task

    task_object = get_task(task)(task_name=task_name)
    data = TaskData(task_name, data_dir, train_file, predict_file)
    task_object.check_data(data, [split])
    documents, seen = [], set()
    for document in task_object.input_texts(task_object.read(data, split)):
        # A line of the corpus format is one sentence: line breaks inside a text are spaces.
        lines = tuple(" ".join(line.split()) for line in document)
        lines = tuple(line for line in lines if line)
        if lines and lines not in seen:
            seen.add(lines)
            documents.append(list(lines))
    return documents


def main(argv):
    if len(argv) > 1:
        sys.exit(f"task_text: error: unexpected arguments {argv[1:]}")
    try:
        for name in ("task", "output_file"):
            if not FLAGS[name].value:
                raise ValueError(f"--{name} is required.")
        import tensorflow as tf

        from kbert.files import write_text

        documents = task_documents(FLAGS.task, FLAGS.task_name, FLAGS.data_dir,
                                   FLAGS.train_file, FLAGS.predict_file, FLAGS.split)
        if not documents:
            raise ValueError(f"--task={FLAGS.task} --split={FLAGS.split} has no text inputs.")
        directory = os.path.dirname(FLAGS.output_file)
        if directory:
            tf.io.gfile.makedirs(directory)
        write_text(FLAGS.output_file, "\n\n".join("\n".join(d) for d in documents) + "\n")
    except (ValueError, FileNotFoundError, NotImplementedError) as e:
        sys.exit(f"task_text: error: {e}")
    lines = sum(len(d) for d in documents)
    print(f"task_text: wrote {len(documents)} documents, {lines} lines to {FLAGS.output_file}")


if __name__ == "__main__":
    app.run(main)
