"""What the gRPC and REST front ends share: find the servable, check, batch, run, describe."""

from __future__ import annotations

import logging
import time

import numpy as np
from tensorflow_serving.apis import get_model_metadata_pb2

from kbert.serving.batching import BatchScheduler
from kbert.serving.errors import ServingError
from kbert.serving.errors import invalid
from kbert.serving.limits import Limits
from kbert.serving.limits import check_deadline
from kbert.serving.model_manager import ModelManager
from kbert.serving.servable import Servable
from kbert.serving.token_counts import example_tokens

log = logging.getLogger("kbert.serving")


class Predictor:
    """Answers Predict, GetModelMetadata and GetModelStatus for any transport.

    Args:
        manager: `ModelManager` holding the loaded versions.
        scheduler: `BatchScheduler` or None (no server-side batching).
        limits: `Limits` on batch size and string length. Defaults to
            `Limits()`.

    Example:

    >>> predictor = Predictor(manager)
    >>> servable, signature, outputs = predictor.predict("sst2", None, None, "", {"text": texts})
    """

    def __init__(self, manager: ModelManager, scheduler: BatchScheduler | None = None,
                 limits: Limits | None = None):
        self.manager = manager
        self.scheduler = scheduler
        self.limits = limits or Limits()

    def predict(self, name: str, version: int | None, label: str | None, signature_name: str,
                inputs: dict[str, np.ndarray], output_filter: list[str] | None = None,
                servable: Servable | None = None, deadline: float | None = None):
        """Runs one Predict request.

        Args:
            name: str. Model name.
            version: int or None. Specific version, or None for the latest.
            label: str or None. Version label.
            signature_name: str. "" means `serving_default`.
            inputs: dict of input name to array.
            output_filter: list of str or None. Outputs to return.
            servable: `Servable` or None. Already looked up (REST does, to
                read its signature's input types).
            deadline: float or None. `time.monotonic()` instant after which
                the model is not run (the client has given up).

        Returns:
            `(servable, signature_name, outputs)`.

        Raises:
            ServingError: with the status the client should see.
        """
        started = time.perf_counter()
        code = "OK"
        signature = signature_name or "serving_default"
        batch = 0
        try:
            servable = servable or self.manager.get(name, version, label)
            signature = servable.signature(signature_name)
            batch = servable.validate(signature, inputs)
            self.limits.check_inputs(inputs)
            if output_filter:
                outputs_known = set(servable.signature_defs[signature].outputs)
                unknown = sorted(set(output_filter) - outputs_known)
                if unknown:
                    raise invalid(f"output_filter names {unknown}, which signature {signature!r} does not "
                                  f"produce; it has {sorted(outputs_known)}.")
            check_deadline(deadline, "the model ran")
            outputs = self._run(servable, signature, inputs, batch, deadline)
            if output_filter:
                outputs = {key: outputs[key] for key in output_filter}
            return servable, signature, outputs
        except ServingError as e:
            code = e.code.name
            raise
        finally:
            log.debug("Predict model=%s version=%s signature=%s batch=%d status=%s %.1fms", name,
                      servable.version if servable else version, signature, batch, code,
                      (time.perf_counter() - started) * 1e3)

    def _run(self, servable: Servable, signature: str, inputs: dict, batch: int,
             deadline: float | None) -> dict:
        if self.scheduler is None:
            return servable.run(signature, inputs)
        key = (id(servable), signature,
               tuple(sorted((k, v.shape[1:], v.dtype.str) for k, v in inputs.items())))
        return self.scheduler.run(key, lambda batched: servable.run(signature, batched), inputs, batch,
                                  deadline, tokens=example_tokens(inputs, servable.truncation_length))

    def metadata(self, name: str, version: int | None, label: str | None):
        """Returns `(servable, SignatureDefMap)` for GetModelMetadata."""
        started = time.perf_counter()
        code = "OK"
        try:
            servable = self.manager.get(name, version, label)
            signature_map = get_model_metadata_pb2.SignatureDefMap()
            for key, value in servable.signature_defs.items():
                if key != "__saved_model_init_op":
                    signature_map.signature_def[key].CopyFrom(value)
            return servable, signature_map
        except ServingError as e:
            code = e.code.name
            raise
        finally:
            log.debug("GetModelMetadata model=%s version=%s status=%s %.1fms", name, version, code,
                      (time.perf_counter() - started) * 1e3)
