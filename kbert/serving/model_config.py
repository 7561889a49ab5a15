"""Which models to serve: `--model_name`/`--model_base_path` or a `--model_config_file`.

The config file is TF Serving's `ModelServerConfig` text proto (the same file
works with `tensorflow_model_server`):

    model_config_list {
      config { name: "sst2" base_path: "/models/sst2" model_platform: "tensorflow" }
      config {
        name: "ner" base_path: "/models/ner"
        model_version_policy { specific { versions: 1 versions: 2 } }
        version_labels { key: "stable" value: 1 }
      }
    }
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2


@dataclasses.dataclass
class ModelConfig:
    """One served model.

    Args:
        name: str. Name clients ask for.
        base_path: str. Directory holding numbered version directories.
        policy: str. `latest` (serve the newest `num_versions`), `all`, or
            `specific`. Defaults to `latest`.
        num_versions: int. For `latest`. Defaults to 1.
        versions: list of int. For `specific`.
        version_labels: dict of str to int. Labels clients may ask for.
    """

    name: str
    base_path: str
    policy: str = "latest"
    num_versions: int = 1
    versions: list[int] = dataclasses.field(default_factory=list)
    version_labels: dict[str, int] = dataclasses.field(default_factory=dict)

    def aspired(self, available: list[int]) -> list[int]:
        """The versions to serve out of those on disk."""
        available = sorted(available)
        if self.policy == "all":
            return available
        if self.policy == "specific":
            return [v for v in available if v in set(self.versions)]
        return available[-self.num_versions:] if available else []


def read_model_config_file(path: str) -> list[ModelConfig]:
    """Parses a TF Serving `ModelServerConfig` text proto into `ModelConfig`s.

    Relative `base_path`s are taken relative to the config file's directory.

    Args:
        path: str. The `--model_config_file`.

    Returns:
        The models, in file order.

    Example:

    >>> [config.name for config in read_model_config_file("serving/models.config")]
    ['sst2', 'ner']
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"--model_config_file={path} does not exist.")
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    proto = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, proto)
    except text_format.ParseError as e:
        raise ValueError(f"--model_config_file={path} is not a ModelServerConfig text proto: {e}") from None
    return model_configs(proto, f"--model_config_file={path}", os.path.dirname(os.path.abspath(path)))


def model_configs(proto: model_server_config_pb2.ModelServerConfig, source: str,
                  base_dir: str | None = None) -> list[ModelConfig]:
    """The `ModelConfig`s of a `ModelServerConfig` (a config file's, or a reload request's).

    Args:
        proto: `ModelServerConfig` with a `model_config_list`.
        source: str. How errors name where it came from (`--model_config_file=...`).
        base_dir: str or None. Directory relative `base_path`s are joined to;
            None refuses them (TF Serving's reload takes absolute paths only).

    Returns:
        The models, in the proto's order.

    Raises:
        ValueError: no model, a model without name or base_path, a name twice,
            another platform, or a relative path without `base_dir`.
    """
    if proto.WhichOneof("config") != "model_config_list" or not proto.model_config_list.config:
        raise ValueError(f"{source} lists no model under model_config_list.")
    configs, names = [], set()
    for entry in proto.model_config_list.config:
        if not entry.name or not entry.base_path:
            raise ValueError(f"{source}: every config needs name and base_path; "
                             f"got {text_format.MessageToString(entry, as_one_line=True)!r}.")
        if entry.name in names:
            raise ValueError(f"{source}: model name {entry.name!r} appears twice.")
        names.add(entry.name)
        if entry.model_platform not in ("", "tensorflow"):
            raise ValueError(f"{source}: model {entry.name!r} has model_platform "
                             f"{entry.model_platform!r}; kbert-serve serves 'tensorflow' SavedModels.")
        base_path = entry.base_path
        if "://" not in base_path and not os.path.isabs(base_path):
            if base_dir is None:
                raise ValueError(f"{source}: model {entry.name!r} has the relative base_path "
                                 f"{base_path!r}; a reload request needs absolute paths (as TF Serving).")
            base_path = os.path.join(base_dir, base_path)
        config = ModelConfig(entry.name, base_path, version_labels=dict(entry.version_labels))
        policy = entry.model_version_policy.WhichOneof("policy_choice")
        if policy == "all":
            config.policy = "all"
        elif policy == "specific":
            config.policy = "specific"
            config.versions = list(entry.model_version_policy.specific.versions)
        elif policy == "latest":
            config.num_versions = entry.model_version_policy.latest.num_versions or 1
        configs.append(config)
    return configs
