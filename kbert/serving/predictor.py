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
from kbert.serving.metrics import RequestRecord
from kbert.serving.metrics import ServingMetrics
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
        metrics: `ServingMetrics` or None. Records every batch the model runs
            and the examples of every request. Defaults to a private one.

    Example:

    >>> predictor = Predictor(manager)
    >>> servable, signature, outputs = predictor.predict("sst2", None, None, "", {"text": texts})
    """

    def __init__(self, manager: ModelManager, scheduler: BatchScheduler | None = None,
                 limits: Limits | None = None, metrics: ServingMetrics | None = None):
        self.manager = manager
        self.scheduler = scheduler
        self.limits = limits or Limits()
        self.metrics = metrics or ServingMetrics()

    def predict(self, name: str, version: int | None, label: str | None, signature_name: str,
                inputs: dict[str, np.ndarray], output_filter: list[str] | None = None,
                servable: Servable | None = None, deadline: float | None = None,
                record: RequestRecord | None = None):
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
            record: `RequestRecord` or None. The request's metrics record,
                labelled here with the servable and signature once known.

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
            if record is not None:
                record.servable(servable, signature)
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
            self.metrics.observe_examples(servable, signature, record.api if record else "predict", batch)
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
        run = self.batch_runner(servable, signature)
        if self.scheduler is None:
            return run(inputs)
        key = (id(servable), signature,
               tuple(sorted((k, v.shape[1:], v.dtype.str) for k, v in inputs.items())))
        return self.scheduler.run(key, run, inputs, batch, deadline,
                                  tokens=example_tokens(inputs, servable.truncation_length))

    def batch_runner(self, servable: Servable, signature: str):
        """The function that runs one batch of a signature and records it in the metrics.

        Args:
            servable: `Servable`.
            signature: str. Signature name.

        Returns:
            `run(batched_inputs) -> outputs`. Each batch's examples
            (`kbert_serving_batch_size`) and estimated padded tokens, rows x
            the longest example's estimate (`kbert_serving_batch_tokens`;
            `token_counts.example_tokens`, as the token budget counts them),
            are recorded.
        """
        def run(batched: dict) -> dict:
            tokens = example_tokens(batched, servable.truncation_length) if batched else []
            size = len(tokens)
            self.metrics.observe_batch(servable.name, servable.version, signature, size,
                                       size * int(max(tokens)) if size else 0)
            return servable.run(signature, batched)

        return run

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
