"""kbert-serve: serve kbert SavedModels over TF Serving's gRPC and REST protocol.

    kbert-serve --model_name=sst2 --model_base_path=export/sst2
    kbert-serve --model_config_file=serving/models.config --enable_batching \
        --batching_parameters_file=serving/batching_parameters.txt

Flags are `tensorflow_model_server`'s. It prints one line when ready, logs one
line per request with -v 1 (debug), and stops cleanly on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from absl import flags

from kbert.bin import common

flags.DEFINE_integer("port", 8500, "Port for gRPC (0 picks a free one).")
flags.DEFINE_integer("rest_api_port", 8501, "Port for the REST API; 0 turns REST off.")
flags.DEFINE_string("host", "127.0.0.1", "Address to bind; 0.0.0.0 to accept other machines.")
flags.DEFINE_string("model_name", "default", "Name of the model (with --model_base_path).")
flags.DEFINE_string("model_base_path", None, "Directory of numbered versions, e.g. the --export_dir of "
                    "kbert-export.")
flags.DEFINE_string("model_config_file", None, "A ModelServerConfig text proto listing several models "
                    "(see serving/models.config); replaces --model_name/--model_base_path.")
flags.DEFINE_float("file_system_poll_wait_seconds", 1, "Seconds between looks for new versions; new ones "
                   "load while serving. 0 looks once at start.")
flags.DEFINE_bool("enable_batching", False, "Merge concurrent requests into batches.")
flags.DEFINE_string("batching_parameters_file", None, "BatchingParameters text proto (max_batch_size, "
                    "batch_timeout_micros, num_batch_threads, max_enqueued_batches, allowed_batch_sizes).")
flags.DEFINE_integer("max_request_bytes", 64 << 20, "Largest request accepted; larger ones get "
                     "RESOURCE_EXHAUSTED (HTTP 413).")
flags.DEFINE_integer("grpc_max_threads", 64, "gRPC requests handled at once.")
FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    # -v 1 turns on kbert-serve's per-request lines only, not every library's debug output.
    logging.root.setLevel(logging.INFO)
    logging.getLogger("kbert.serving").setLevel(logging.DEBUG if FLAGS.verbosity >= 1 else logging.INFO)
    from kbert.serving.batching import BatchingParameters
    from kbert.serving.model_config import ModelConfig
    from kbert.serving.model_config import read_model_config_file
    from kbert.serving.server import ModelServer

    if FLAGS.model_config_file:
        if FLAGS.model_base_path:
            raise ValueError("pass either --model_config_file or --model_base_path, not both.")
        configs = read_model_config_file(FLAGS.model_config_file)
    elif FLAGS.model_base_path:
        configs = [ModelConfig(FLAGS.model_name, os.path.abspath(FLAGS.model_base_path)
                               if "://" not in FLAGS.model_base_path else FLAGS.model_base_path)]
    else:
        raise ValueError("--model_base_path (with --model_name) or --model_config_file is required.")
    batching = None
    if FLAGS.enable_batching:
        batching = (BatchingParameters.from_file(FLAGS.batching_parameters_file)
                    if FLAGS.batching_parameters_file else BatchingParameters())
    elif FLAGS.batching_parameters_file:
        raise ValueError("--batching_parameters_file needs --enable_batching.")
    server = ModelServer(configs, host=FLAGS.host, port=FLAGS.port, rest_api_port=FLAGS.rest_api_port,
                         poll_wait_seconds=FLAGS.file_system_poll_wait_seconds, batching=batching,
                         max_request_bytes=FLAGS.max_request_bytes, grpc_max_threads=FLAGS.grpc_max_threads)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    print(server.ready_line(), flush=True)
    while not stop.wait(0.5):
        pass
    server.stop()
    print("kbert-serve: stopped", flush=True)
    sys.stdout.flush()


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
