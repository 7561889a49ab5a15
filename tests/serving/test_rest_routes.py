"""The REST API's POST routes: one table gives each path its handler, metrics label and error shape."""

import grpc
import pytest

from kbert.serving import rest
from kbert.serving.errors import ServingError


@pytest.mark.parametrize("path, api", [
    ("/v1/embeddings", "embeddings"),
    ("/rerank", "rerank"),
    ("/embed", "embed"),
    ("/predict", "tei_predict"),
    ("/tokenize", "tokenize"),
    ("/v1/indexes/wiki:search", "search"),
    ("/v1/models/sst2:predict", "predict"),
    ("/v1/models/sst2/versions/3:classify", "classify"),
    ("/v1/models/sst2/labels/stable:regress", "regress"),
    ("/v1/embeddings/", "unknown"),
    ("/v1/models/sst2:explain", "unknown"),
])
def test_each_post_path_counts_under_its_routes_label(path, api):
    assert rest._api_of(path) == api


def test_every_route_has_a_handler_and_its_clients_error_shape():
    for route in rest.POST_ROUTES:
        assert callable(getattr(rest.RestApi, route.handler)), route
    error = ServingError(grpc.StatusCode.INVALID_ARGUMENT, "bad 'input'")
    assert rest.error_body("/v1/embeddings", error) == {"error": {
        "message": "bad 'input'", "type": "invalid_request_error", "param": None,
        "code": "invalid_argument"}}
    for path in ("/rerank", "/embed", "/predict", "/tokenize", "/info", "/health"):
        assert rest.error_body(path, error) == {"error": "bad 'input'", "error_type": "Validation"}
    assert rest.error_body("/v1/models", error)["error"]["type"] == "invalid_request_error"
    for path in ("/v1/models/sst2:predict", "/v1/indexes/wiki:search", "/nowhere"):
        assert rest.error_body(path, error) == {"error": "bad 'input'"}
