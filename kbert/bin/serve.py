"""kbert-serve: serve kbert SavedModels over TF Serving's gRPC and REST protocol, and OpenAI's and TEI's APIs.

    kbert-serve --model_name=sst2 --model_base_path=export/sst2
    kbert-serve --model_config_file=serving/models.config --enable_batching \
        --batching_parameters_file=serving/batching_parameters.txt

Flags are `tensorflow_model_server`'s (TEI's for --api_key, --max_batch_tokens, --tei_model). It
prints one line when ready, logs one line per request with -v 1 (debug), and stops cleanly on
SIGTERM or Ctrl-C.
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
flags.DEFINE_integer("max_batch_tokens", 512, "With --enable_batching: most padded tokens (rows x the longest "
                     "text's tokens) in one merged batch, as text-embeddings-inference's --max-batch-tokens; "
                     "requests close in length run together. A text's tokens are estimated from its bytes (words + "
                     "punctuation + letters / 8 + non-ASCII bytes / 3, + [CLS]/[SEP], at most the model's "
                     "max_seq_length; kbert.serving.token_counts). A request over it runs alone. 0 counts examples only (the batching file's max_batch_size, as TF Serving).")
flags.DEFINE_integer("max_concurrent_requests", 512, "Most requests (gRPC and REST together) being read, queued "
                     "or answered at once; more get RESOURCE_EXHAUSTED (HTTP 429) at once instead of queueing.")
flags.DEFINE_integer("max_request_bytes", 64 << 20, "Largest request accepted; larger ones get "
                     "RESOURCE_EXHAUSTED (HTTP 413).")
flags.DEFINE_integer("max_batch_size", 256, "Most examples in one Predict request; larger batches get "
                     "INVALID_ARGUMENT (HTTP 400) before any work. (The batching file's max_batch_size is the "
                     "size of merged batches, a different thing.)")
flags.DEFINE_integer("max_text_bytes", 1 << 20, "Longest string (UTF-8 bytes) in any string input; longer ones "
                     "get INVALID_ARGUMENT (HTTP 400). NER and QA models read long texts in windows.")
flags.DEFINE_integer("max_concurrent_request_bytes", 256 << 20, "Most request bytes held by all requests being "
                     "read or answered at once; past it requests get UNAVAILABLE (HTTP 503) and may retry.")
flags.DEFINE_integer("grpc_max_threads", 64, "gRPC requests handled at once.")
flags.DEFINE_integer("grpc_max_concurrent_rpcs", 128, "gRPC requests accepted at once (handled or waiting for "
                     "a thread); more get RESOURCE_EXHAUSTED at once.")
flags.DEFINE_integer("rest_api_num_threads", 16, "REST requests handled at once; connections are read apart "
                     "from these threads, so slow clients do not hold them.")
flags.DEFINE_integer("rest_api_timeout_in_ms", 30000, "Longest wait for a REST request's headers, for its body, "
                     "and for a thread to run it (then HTTP 504); idle connections close after it too.")
flags.DEFINE_integer("rest_api_max_connections", 1000, "Open REST connections past which new ones get HTTP 503.")
flags.DEFINE_string("index_dir", None, "A kbert-index index to search over REST at "
                    "POST /v1/indexes/<--index_name>:search ({\"queries\": [...], \"top_k\": 10}); model "
                    "endpoints keep working beside it. (An exact index is also a model: --model_base_path=INDEX "
                    "serves its search signature.)")
flags.DEFINE_string("index_name", "default", "Name of --index_dir in the search URL.")
flags.DEFINE_string("rerank_model_dir", None, "With --index_dir: a cross-encoder (fine-tuned --task=rerank "
                    "directory or its export) re-scoring each search's top --rerank_top_k hits.")
flags.DEFINE_integer("rerank_top_k", 50, "Hits re-scored by --rerank_model_dir per query.")
flags.DEFINE_enum("rerank_fusion", "none", ["none", "rrf", "interpolate"], "With --rerank_model_dir: order of the "
                  "re-scored hits: none = the cross-encoder's score alone; rrf = reciprocal-rank fusion "
                  "with the first stage's ranking; interpolate = z-scored first-stage and cross-encoder "
                  "scores mixed by --rerank_fusion_weight.")
flags.DEFINE_float("rerank_fusion_weight", 0.5, "With --rerank_model_dir: the cross-encoder's share with "
                   "--rerank_fusion=interpolate (0..1).")
flags.DEFINE_bool("onnxruntime", True, "Run a version's ONNX Runtime int8 model (kbert-export "
                  "--quantize=int8 writes one in assets.extra/onnxruntime/ for classification, "
                  "regression, re-ranking and embedding models) for the signatures it covers; "
                  "--noonnxruntime runs the SavedModel's own TensorFlow int8 graph, as stock TF "
                  "Serving does.")
flags.DEFINE_integer("onnxruntime_intra_op_parallelism", 0, "Threads one ONNX Runtime model call "
                     "may use (TF Serving's --tensorflow_intra_op_parallelism, for the ONNX Runtime "
                     "int8 models); 0: with --enable_batching, the CPU count divided by "
                     "num_batch_threads (at least 1), else ONNX Runtime's choice, one per physical "
                     "core. Idle ONNX Runtime threads sleep instead of spinning (serving/README.md).")
flags.DEFINE_integer("max_num_load_retries", 5, "Timed retries of a model version that failed to load (any "
                     "change of a file under it also retries it).")
flags.DEFINE_integer("load_retry_interval_micros", 60_000_000, "Microseconds between those retries.")
flags.DEFINE_float("model_config_file_poll_wait_seconds", 0, "Seconds between re-reads of --model_config_file: "
                   "models added there load, removed ones unload, policy and label changes apply, unchanged "
                   "models are not touched. 0 reads it once. (gRPC HandleReloadConfigRequest reloads too.)")
flags.DEFINE_bool("allow_version_labels_for_unavailable_models", False, "Let a version_labels entry name a "
                  "version that is not loaded (yet); without it such a label stops the start or the reload. A "
                  "label in use still moves only to a loaded version (TF Serving's rule).")
flags.DEFINE_bool("enable_model_warmup", True, "Replay a version's assets.extra/tf_serving_warmup_requests "
                  "(kbert-export writes them) before it serves, so the first requests are not slow.")
flags.DEFINE_integer("num_request_iterations_for_warmup", 1, "Times each warm-up request is replayed.")
flags.DEFINE_bool("enable_grpc_healthcheck_service", False, "Answer grpc.health.v1.Health: SERVING while "
                  "every model has a version loaded (services '', ModelService, PredictionService).")
flags.DEFINE_string("ssl_config_file", None, "TF Serving's SSLConfig text proto (server_key, server_cert, "
                    "custom_ca, client_verify, as PEM text): the gRPC port speaks TLS. REST stays plain HTTP.")
flags.DEFINE_string("api_key", None, "Requests must carry 'Authorization: Bearer <key>' (gRPC: authorization "
                    "metadata), or get 401/UNAUTHENTICATED; GET /health, the metrics and grpc.health.v1 stay "
                    "open. Keep it off the command line with --flagfile=FILE.")
flags.DEFINE_string("tei_model", None, "The model TEI's routes (/embed, /predict, /rerank, /tokenize, /info) "
                    "answer when a request names none; unset: the only model that can answer the route.")
FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    # -v 1 turns on kbert-serve's per-request lines only, not every library's debug output.
    logging.root.setLevel(logging.INFO)
    logging.getLogger("kbert.serving").setLevel(logging.DEBUG if FLAGS.verbosity >= 1 else logging.INFO)
    from kbert.serving.batching import BatchingParameters
    from kbert.serving.limits import Limits
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
    elif FLAGS.index_dir:
        configs = []
    else:
        raise ValueError("--model_base_path (with --model_name), --model_config_file or --index_dir is required.")
    indexes = {}
    if FLAGS.index_dir:
        from kbert.index import IndexSearcher

        indexes[FLAGS.index_name] = IndexSearcher(FLAGS.index_dir, rerank_model_dir=FLAGS.rerank_model_dir,
                                                  rerank_top_k=FLAGS.rerank_top_k,
                                                  rerank_fusion=FLAGS.rerank_fusion,
                                                  rerank_fusion_weight=FLAGS.rerank_fusion_weight)
    elif FLAGS.rerank_model_dir:
        raise ValueError("--rerank_model_dir re-ranks the hits of --index_dir; pass --index_dir too.")
    batching = None
    if FLAGS.enable_batching:
        batching = (BatchingParameters.from_file(FLAGS.batching_parameters_file)
                    if FLAGS.batching_parameters_file else BatchingParameters())
    elif FLAGS.batching_parameters_file:
        raise ValueError("--batching_parameters_file needs --enable_batching.")
    limits = Limits(max_batch_size=FLAGS.max_batch_size, max_text_bytes=FLAGS.max_text_bytes,
                    max_request_bytes=FLAGS.max_request_bytes,
                    max_concurrent_request_bytes=FLAGS.max_concurrent_request_bytes,
                    max_concurrent_requests=FLAGS.max_concurrent_requests)
    if FLAGS.max_num_load_retries < 0 or FLAGS.load_retry_interval_micros < 0:
        raise ValueError("--max_num_load_retries and --load_retry_interval_micros must be >= 0.")
    if FLAGS.num_request_iterations_for_warmup < 1:
        raise ValueError(f"--num_request_iterations_for_warmup={FLAGS.num_request_iterations_for_warmup}; "
                         "it must be >= 1 (--noenable_model_warmup turns warm-up off).")
    _raise_open_file_limit(FLAGS.rest_api_max_connections + FLAGS.grpc_max_concurrent_rpcs + 256)
    server = ModelServer(configs, host=FLAGS.host, port=FLAGS.port, rest_api_port=FLAGS.rest_api_port,
                         poll_wait_seconds=FLAGS.file_system_poll_wait_seconds, batching=batching,
                         max_batch_tokens=FLAGS.max_batch_tokens, limits=limits,
                         grpc_max_threads=FLAGS.grpc_max_threads,
                         grpc_max_concurrent_rpcs=FLAGS.grpc_max_concurrent_rpcs,
                         rest_api_num_threads=FLAGS.rest_api_num_threads,
                         rest_api_timeout_in_ms=FLAGS.rest_api_timeout_in_ms,
                         rest_api_max_connections=FLAGS.rest_api_max_connections,
                         max_num_load_retries=FLAGS.max_num_load_retries,
                         load_retry_interval_seconds=FLAGS.load_retry_interval_micros / 1e6,
                         indexes=indexes, use_onnxruntime=FLAGS.onnxruntime,
                         onnxruntime_threads=FLAGS.onnxruntime_intra_op_parallelism,
                         config_file=FLAGS.model_config_file,
                         config_poll_wait_seconds=FLAGS.model_config_file_poll_wait_seconds,
                         allow_unavailable_labels=FLAGS.allow_version_labels_for_unavailable_models,
                         warmup_iterations=(FLAGS.num_request_iterations_for_warmup
                                            if FLAGS.enable_model_warmup else 0),
                         enable_grpc_healthcheck_service=FLAGS.enable_grpc_healthcheck_service,
                         ssl_config_file=FLAGS.ssl_config_file, api_key=FLAGS.api_key,
                         tei_model=FLAGS.tei_model)
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


def _raise_open_file_limit(wanted: int) -> None:
    """Lifts the soft limit on open files towards `wanted` (up to the hard limit).

    Every connection is a file descriptor; a common soft limit of 1024 would
    refuse connections below --rest_api_max_connections.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < wanted:
            logging.warning("kbert-serve: only %d open files allowed (ulimit -Hn); lower "
                            "--rest_api_max_connections or raise the limit.", new)


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
