"""Reading Hugging Face `model.safetensors` (or its shards) as numpy arrays, without torch."""

from __future__ import annotations

import os

import numpy as np

from kbert.files import read_json


class SafetensorsFiles:
    """The tensors of `model.safetensors` or a sharded `model.safetensors.index.json`."""

    def __init__(self, hf_dir: str):
        from safetensors import safe_open

        single = os.path.join(hf_dir, "model.safetensors")
        index = os.path.join(hf_dir, "model.safetensors.index.json")
        if os.path.exists(single):
            files = [single]
        elif os.path.exists(index):
            shards = read_json(index)["weight_map"].values()
            files = sorted({os.path.join(hf_dir, shard) for shard in shards})
        else:
            found = sorted(os.listdir(hf_dir))
            hint = (" It has pytorch_model.bin: save it as safetensors first "
                    "(model.save_pretrained(dir, safe_serialization=True))."
                    if "pytorch_model.bin" in found else "")
            raise FileNotFoundError(
                f"{hf_dir} has no model.safetensors (or model.safetensors.index.json); "
                f"found {found}.{hint}"
            )
        self.path = files[0] if len(files) == 1 else index
        self._handles = {}
        for path in files:
            handle = safe_open(path, framework="numpy")
            for key in handle.keys():
                self._handles[key] = handle

    def shapes(self) -> dict[str, tuple]:
        return {k: tuple(h.get_slice(k).get_shape()) for k, h in self._handles.items()}

    def get(self, name: str) -> np.ndarray:
        return self._handles[name].get_tensor(name)
