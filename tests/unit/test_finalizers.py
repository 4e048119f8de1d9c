"""Finalizers: guarded merge patches, and no write when there is nothing to do."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubemoon_core import APIResource, GroupVersionResource, Scope
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.objects import add_finalizer_request, has_finalizer, remove_finalizer_request

WIDGETS = GroupVersionResource("example.com", "v1", "widgets")
FLEETS = APIResource(GroupVersionResource("example.com", "v1", "fleets"), "Fleet", Scope.CLUSTER)
FIN = "example.com/cleanup"
OBJ: dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "ns", "resourceVersion": "42", "finalizers": ["a.io/x"]},
}


def test_add_is_a_merge_patch_guarded_by_the_resource_version() -> None:
    request = add_finalizer_request(WIDGETS, OBJ, FIN)
    assert request is not None
    assert (request.method, request.path) == (
        "PATCH",
        "/apis/example.com/v1/namespaces/ns/widgets/w",
    )
    assert request.header("Content-Type") == "application/merge-patch+json"
    assert json.loads(request.body) == {
        "metadata": {"resourceVersion": "42", "finalizers": ["a.io/x", FIN]}
    }
    assert not has_finalizer(OBJ, FIN)


def test_nothing_to_do_is_no_request() -> None:
    with_it = {**OBJ, "metadata": {**OBJ["metadata"], "finalizers": ["a.io/x", FIN]}}
    assert has_finalizer(with_it, FIN)
    assert add_finalizer_request(WIDGETS, with_it, FIN) is None
    assert remove_finalizer_request(WIDGETS, OBJ, FIN) is None
    request = remove_finalizer_request(WIDGETS, with_it, FIN)
    assert request is not None
    assert json.loads(request.body) == {
        "metadata": {"resourceVersion": "42", "finalizers": ["a.io/x"]}
    }


def test_first_finalizer_and_cluster_scoped_objects() -> None:
    fleet = {"metadata": {"name": "f", "namespace": "ignored", "resourceVersion": "1"}}
    request = add_finalizer_request(FLEETS, fleet, "cleanup")
    assert request is not None
    assert request.path == "/apis/example.com/v1/fleets/f"
    assert json.loads(request.body)["metadata"]["finalizers"] == ["cleanup"]
    odd = {"metadata": {"name": "f", "resourceVersion": "1", "finalizers": "x"}}
    assert not has_finalizer(odd, "x")


def test_misuse_is_refused() -> None:
    with pytest.raises(LocalProtocolError, match="resourceVersion to guard"):
        add_finalizer_request(WIDGETS, {"metadata": {"name": "w", "namespace": "ns"}}, FIN)
    with pytest.raises(LocalProtocolError, match="no metadata.name"):
        add_finalizer_request(WIDGETS, {"metadata": {"resourceVersion": "1"}}, FIN)
    with pytest.raises(LocalProtocolError, match="no metadata.name"):
        add_finalizer_request(WIDGETS, {}, FIN)
    deleting = {**OBJ, "metadata": {**OBJ["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    with pytest.raises(LocalProtocolError, match="being deleted"):
        add_finalizer_request(WIDGETS, deleting, FIN)
    assert remove_finalizer_request(WIDGETS, deleting, "a.io/x") is not None


@pytest.mark.parametrize(
    "finalizer", ["", "a b", "/x", "Bad_Prefix/x", "a.io/", "a.io/" + "x" * 64, 3, "x" * 300 + "/y"]
)
def test_finalizer_names_are_qualified_names(finalizer: object) -> None:
    with pytest.raises(LocalProtocolError, match="finalizer"):
        add_finalizer_request(WIDGETS, OBJ, finalizer)  # type: ignore[arg-type]
