"""kbert: pre-train, fine-tune and serve BERT encoders with TensorFlow and Keras 3."""

from setuptools import find_packages
from setuptools import setup

setup(
    name="kbert",
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
    ],
    extras_require={
        "test": ["pytest", "tokenizers"],
    },
    entry_points={
        "console_scripts": [
            "kbert-pretrain=kbert.bin.pretrain:run",
            "kbert-export=kbert.bin.export:run",
            "kbert-serve=kbert.bin.serve:run",
        ],
    },
)
