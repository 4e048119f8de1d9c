"""Requests as values: verbs, query options, bodies and headers."""

import json

import pytest

from kubemoon_core import (
    APIResource,
    DeleteOptions,
    GroupVersionResource,
    ListOptions,
    PatchType,
    Request,
    Response,
    Scope,
    WriteOptions,
    apply_request,
    create_request,
    decode_response,
    delete_collection_request,
    delete_request,
    get_request,
    list_request,
    patch_request,
    replace_request,
    watch_request,
)
from kubemoon_core.errors import LocalProtocolError, NamespaceRequired, NotFound
from kubemoon_core.lowlevel import USER_AGENT

CM = GroupVersionResource("", "v1", "configmaps")
CM_RESOURCE = APIResource(CM, "ConfigMap", Scope.NAMESPACED)
NODES = APIResource(GroupVersionResource("", "v1", "nodes"), "Node", Scope.CLUSTER)
OBJ = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}


def test_get_has_default_headers_and_no_body() -> None:
    r = get_request(CM, "a", namespace="ns")
    assert (r.method, r.path, r.query, r.body, r.stream) == (
        "GET",
        "/api/v1/namespaces/ns/configmaps/a",
        (),
        b"",
        False,
    )
    assert r.header("accept") == "application/json"
    assert r.header("User-Agent") == USER_AGENT
    assert r.header("Content-Type") is None
    assert r.target == r.path


def test_list_options_become_the_query_in_a_stable_order() -> None:
    opts = ListOptions(
        label_selector="app in (a,b)",
        field_selector="metadata.name=x",
        limit=500,
        continue_token="tok/en=",
        resource_version="10",
        resource_version_match="NotOlderThan",
        timeout_seconds=30,
        allow_watch_bookmarks=True,
        send_initial_events=True,
    )
    r = list_request(CM_RESOURCE, namespace="ns", options=opts)
    assert [k for k, _ in r.query] == [
        "labelSelector",
        "fieldSelector",
        "limit",
        "continue",
        "resourceVersion",
        "resourceVersionMatch",
        "timeoutSeconds",
        "allowWatchBookmarks",
        "sendInitialEvents",
    ]
    assert r.query_value("continue") == "tok/en="
    assert r.query_value("missing") is None
    # Every reserved character of a value is escaped in the request target.
    assert "labelSelector=app%20in%20%28a%2Cb%29" in r.target
    assert "continue=tok%2Fen%3D" in r.target


def test_watch_is_a_stream_with_watch_1_first() -> None:
    r = watch_request(CM, options=ListOptions(resource_version="5", allow_watch_bookmarks=False))
    assert r.stream
    assert r.path == "/api/v1/configmaps"
    assert r.query == (("watch", "1"), ("resourceVersion", "5"), ("allowWatchBookmarks", "false"))
    assert watch_request(CM).query == (("watch", "1"),)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": -1}, "limit"),
        ({"limit": True}, "limit"),
        ({"timeout_seconds": 1.5}, "timeout_seconds"),
        ({"resource_version_match": "Newest", "resource_version": "1"}, "resource_version_match"),
        ({"resource_version_match": "Exact"}, "needs a resource_version"),
        ({"send_initial_events": True}, "NotOlderThan"),
        ({"label_selector": "a\x00"}, "label_selector"),
        ({"field_selector": 3}, "field_selector"),
    ],
)
def test_bad_list_options_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        ListOptions(**kwargs)  # type: ignore[arg-type]


def test_scope_is_enforced_when_known() -> None:
    with pytest.raises(LocalProtocolError, match="cluster-scoped"):
        get_request(NODES, "n1", namespace="ns")
    with pytest.raises(
        NamespaceRequired, match=r"ConfigMap 'a' \(configmaps.v1\) is namespaced"
    ) as caught:
        get_request(CM_RESOURCE, "a")
    assert (caught.value.kind, caught.value.name, caught.value.resource) == ("ConfigMap", "a", CM)
    # Listing a namespaced resource across all namespaces is fine.
    assert list_request(CM_RESOURCE).path == "/api/v1/configmaps"
    assert get_request(NODES, "n1").path == "/api/v1/nodes/n1"


def test_create_and_replace_send_json() -> None:
    r = create_request(
        CM, OBJ, namespace="ns", options=WriteOptions(dry_run=True, field_manager="m")
    )
    assert (r.method, r.path) == ("POST", "/api/v1/namespaces/ns/configmaps")
    assert r.query == (("dryRun", "All"), ("fieldManager", "m"))
    assert r.header("Content-Type") == "application/json"
    assert json.loads(r.body) == OBJ
    put = replace_request(CM, OBJ, namespace="ns")
    assert (put.method, put.path) == ("PUT", "/api/v1/namespaces/ns/configmaps/a")
    status = replace_request(CM, b"{}", namespace="ns", name="a", subresource="status")
    assert status.path.endswith("/configmaps/a/status")
    assert status.body == b"{}"


def test_replace_needs_a_name_and_bodies_must_be_mappings() -> None:
    with pytest.raises(LocalProtocolError, match="metadata.name"):
        replace_request(CM, {"metadata": {}}, namespace="ns")
    with pytest.raises(LocalProtocolError, match="mapping or bytes"):
        create_request(CM, ["x"], namespace="ns")  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="JSON"):
        create_request(CM, {"x": object()}, namespace="ns")


NS_OBJ = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}}


@pytest.mark.parametrize("target", [CM, CM_RESOURCE])
def test_writes_take_the_namespace_from_the_object(target: GroupVersionResource) -> None:
    path = "/api/v1/namespaces/x/configmaps"
    assert create_request(target, NS_OBJ).path == path
    assert create_request(target, NS_OBJ, namespace="x").path == path
    assert replace_request(target, NS_OBJ).path == f"{path}/a"
    assert replace_request(target, NS_OBJ, subresource="status").path == f"{path}/a/status"
    applied = apply_request(target, NS_OBJ, field_manager="m")
    assert (applied.method, applied.path) == ("PATCH", f"{path}/a")
    # An explicit namespace fills in for an object without one; "" counts as none.
    blank = {"metadata": {"name": "a", "namespace": ""}}
    assert create_request(target, blank, namespace="y").path == "/api/v1/namespaces/y/configmaps"


def test_write_namespace_mismatch_is_refused() -> None:
    for write in (
        lambda: create_request(CM, NS_OBJ, namespace="y"),
        lambda: replace_request(CM_RESOURCE, NS_OBJ, namespace="y"),
        lambda: apply_request(CM, NS_OBJ, field_manager="m", namespace="y"),
    ):
        with pytest.raises(LocalProtocolError, match="does not match metadata.namespace='x'"):
            write()
    with pytest.raises(LocalProtocolError, match="metadata.namespace must be a string"):
        create_request(CM, {"metadata": {"name": "a", "namespace": 3}})


def test_namespaced_writes_need_a_namespace_somewhere() -> None:
    message = (
        r"ConfigMap 'a' \(configmaps.v1\) is namespaced but has no namespace: "
        r"give namespace= or metadata.namespace"
    )
    with pytest.raises(NamespaceRequired, match=message):
        create_request(CM_RESOURCE, OBJ)
    with pytest.raises(NamespaceRequired, match=message):
        replace_request(CM_RESOURCE, OBJ)
    with pytest.raises(NamespaceRequired, match=message):
        apply_request(CM_RESOURCE, OBJ, field_manager="m")
    # A bare GVR has no scope: the cluster path is built and the server judges.
    assert create_request(CM, OBJ).path == "/api/v1/configmaps"
    # A bytes body is not inspected.
    assert replace_request(CM, b"{}", name="a").path == "/api/v1/configmaps/a"


def test_cluster_scoped_writes_ignore_metadata_namespace() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "namespace": "x"}}
    assert create_request(NODES, node).path == "/api/v1/nodes"
    assert replace_request(NODES, node).path == "/api/v1/nodes/n1"
    with pytest.raises(LocalProtocolError, match="cluster-scoped"):
        create_request(NODES, node, namespace="x")


@pytest.mark.parametrize(
    ("patch_type", "patch", "content_type"),
    [
        (PatchType.JSON, [{"op": "add", "path": "/data/x", "value": "1"}], "application/json-patch+json"),
        (PatchType.MERGE, {"data": {"x": "1"}}, "application/merge-patch+json"),
        (PatchType.STRATEGIC_MERGE, {"data": {"x": "1"}}, "application/strategic-merge-patch+json"),
    ],
)  # fmt: skip
def test_patch_types(patch_type: PatchType, patch: object, content_type: str) -> None:
    r = patch_request(CM, "a", patch, patch_type=patch_type, namespace="ns")  # type: ignore[arg-type]
    assert r.method == "PATCH"
    assert r.header("content-type") == content_type
    assert json.loads(r.body) == patch


def test_patch_validation() -> None:
    with pytest.raises(LocalProtocolError, match="list of operations"):
        patch_request(CM, "a", {"op": "x"}, patch_type=PatchType.JSON, namespace="ns")
    with pytest.raises(LocalProtocolError, match="mapping"):
        patch_request(CM, "a", [1], patch_type=PatchType.MERGE, namespace="ns")
    with pytest.raises(LocalProtocolError, match="field_manager"):
        patch_request(CM, "a", {}, patch_type=PatchType.APPLY, namespace="ns")
    with pytest.raises(LocalProtocolError, match="force"):
        patch_request(
            CM,
            "a",
            {},
            patch_type=PatchType.MERGE,
            namespace="ns",
            options=WriteOptions(force=True),
        )
    raw = patch_request(CM, "a", b"data: {}", patch_type=PatchType.MERGE, namespace="ns")
    assert raw.body == b"data: {}"
    with pytest.raises(LocalProtocolError, match="field_manager"):
        WriteOptions(field_manager="")


def test_apply_is_a_patch_with_field_manager_and_force() -> None:
    r = apply_request(CM, OBJ, field_manager="kubemoon", namespace="ns", force=True, dry_run=True)
    assert (r.method, r.path) == ("PATCH", "/api/v1/namespaces/ns/configmaps/a")
    assert r.header("Content-Type") == "application/apply-patch+yaml"
    assert r.query == (("dryRun", "All"), ("fieldManager", "kubemoon"), ("force", "true"))
    assert json.loads(r.body) == OBJ


def test_delete_with_preconditions_and_policy() -> None:
    opts = DeleteOptions(
        propagation_policy="Foreground",
        grace_period_seconds=0,
        dry_run=True,
        precondition_uid="u1",
        precondition_resource_version="7",
    )
    r = delete_request(CM, "a", namespace="ns", options=opts)
    assert r.method == "DELETE"
    assert r.query == (
        ("dryRun", "All"),
        ("gracePeriodSeconds", "0"),
        ("propagationPolicy", "Foreground"),
    )
    assert json.loads(r.body) == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "u1", "resourceVersion": "7"},
    }
    assert r.header("Content-Type") == "application/json"
    plain = delete_request(CM, "a", namespace="ns")
    assert (plain.body, plain.header("Content-Type")) == (b"", None)
    with pytest.raises(LocalProtocolError, match="propagation_policy"):
        DeleteOptions(propagation_policy="Later")


def test_delete_collection_combines_selectors_and_options() -> None:
    r = delete_collection_request(
        CM,
        namespace="ns",
        list_options=ListOptions(label_selector="a=b"),
        options=DeleteOptions(propagation_policy="Background", precondition_uid="u"),
    )
    assert (r.method, r.path) == ("DELETE", "/api/v1/namespaces/ns/configmaps")
    assert r.query == (("labelSelector", "a=b"), ("propagationPolicy", "Background"))
    assert json.loads(r.body)["preconditions"] == {"uid": "u"}
    assert delete_collection_request(CM).body == b""


def test_decode_response() -> None:
    ok = Response(200, (("Content-Type", "application/json"),), b'{"kind":"ConfigMap"}')
    assert ok.ok and ok.header("content-type") == "application/json"
    assert ok.header("x") is None
    assert decode_response(ok) == {"kind": "ConfigMap"}
    with pytest.raises(NotFound):
        decode_response(Response(404, (), b'{"kind":"Status","code":404,"reason":"NotFound"}'))


def test_request_is_frozen_and_hashable() -> None:
    r = Request("GET", "/api")
    assert hash(r) == hash(Request("GET", "/api"))
    with pytest.raises(AttributeError):
        r.method = "POST"  # type: ignore[misc]


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999999"])
def test_a_response_with_non_finite_numbers_is_a_decode_error(number: bytes) -> None:
    from kubemoon_core import Response, decode_response
    from kubemoon_core.errors import DecodeError

    with pytest.raises(DecodeError, match="invalid JSON"):
        decode_response(Response(200, (), b'{"kind": "ConfigMap", "n": ' + number + b"}"))


def test_metadata_only_lists_and_watches_ask_for_partial_object_metadata() -> None:
    import random

    from kubemoon_core import GroupVersionResource, list_request, watch_request
    from kubemoon_core.lowlevel import METADATA_ONLY_ACCEPT, METADATA_ONLY_LIST_ACCEPT, Reflector

    cms = GroupVersionResource("", "v1", "configmaps")
    assert list_request(cms, metadata_only=True).header("accept") == METADATA_ONLY_LIST_ACCEPT
    assert watch_request(cms, metadata_only=True).header("accept") == METADATA_ONLY_ACCEPT
    assert list_request(cms).header("accept") == "application/json"
    reflector = Reflector(cms, rng=random.Random(1), metadata_only=True)
    first = reflector.next_request(0.0)
    assert first is not None
    assert first.header("accept") == METADATA_ONLY_LIST_ACCEPT
