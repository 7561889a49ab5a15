"""kbert-serve: TF Serving's gRPC and REST protocol in Python, for kbert SavedModels."""

from kbert.serving.batching import BatchingParameters
from kbert.serving.limits import Limits
from kbert.serving.model_manager import ModelManager
from kbert.serving.server import ModelServer
