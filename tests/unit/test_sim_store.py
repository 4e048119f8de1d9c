"""The simulated API server's pure model (issue 32): CRUD, conflicts, generation, status,
finalizers, garbage collection, selectors, pages, watches and 410, refusals."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from kubemoon_core import GroupVersionResource, Request, Scope
from kubemoon_core.typed import MetadataField, custom_resource
from kubemoon_testing.sim import (
    NotModelled,
    SimApiServer,
    SimResource,
    StatusError,
    custom,
    handle_request,
)

WIDGETS = custom("example.com", "v1", "widgets", "Widget")
PLAIN = custom("example.com", "v1", "plains", "Plain", status_subresource=False)
CLUSTERED = custom("example.com", "v1", "clusters", "Cluster", scope=Scope.CLUSTER)


@pytest.fixture
def server() -> SimApiServer:
    return SimApiServer([WIDGETS, PLAIN, CLUSTERED])


def configmaps(server: SimApiServer) -> SimResource:
    return server.resource(GroupVersionResource("", "v1", "configmaps"))


def cm(name: str, **extra: Any) -> dict[str, Any]:
    metadata = {"name": name, **extra.pop("metadata", {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, **extra}


def widget(name: str, size: int = 1, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, **metadata},
        "spec": {"size": size},
    }


def raises(code: int, reason: str) -> Any:
    """Like ``pytest.raises(StatusError)``, checking the code and reason too."""

    class _Check:
        error: StatusError

        def __enter__(self) -> _Check:
            return self

        def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
            assert isinstance(exc, StatusError), f"expected {code} {reason}, got {exc!r}"
            assert (exc.code, exc.reason) == (code, reason), exc.status()
            self.error = exc
            return True

    return _Check()


def test_create_get_and_already_exists(server: SimApiServer) -> None:
    res = configmaps(server)
    created = server.create(res, "default", cm("a", data={"k": "v"}), 3.0)
    meta = created["metadata"]
    assert meta["namespace"] == "default"
    assert meta["creationTimestamp"] == "2026-01-01T00:00:03Z"
    assert int(meta["resourceVersion"]) == server.resource_version
    assert "generation" not in meta  # ConfigMaps have none
    assert server.get(res, "default", "a") == created
    with raises(409, "AlreadyExists") as check:
        server.create(res, "default", cm("a"), 4.0)
    assert check.error.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "a" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "a", "kind": "configmaps"},
        "code": 409,
    }


def test_get_absent_and_missing_namespace(server: SimApiServer) -> None:
    with raises(404, "NotFound") as check:
        server.get(WIDGETS, "default", "nope")
    assert check.error.status()["message"] == 'widgets.example.com "nope" not found'
    assert check.error.status()["details"] == {
        "name": "nope",
        "group": "example.com",
        "kind": "widgets",
    }
    with raises(404, "NotFound") as check:
        server.create(configmaps(server), "elsewhere", cm("a"), 0.0)
    assert check.error.message == 'namespaces "elsewhere" not found'


def test_uids_are_reproducible_from_the_seed() -> None:
    first, second = SimApiServer(seed=7), SimApiServer(seed=7)
    one = first.create(configmaps(first), "default", cm("a"), 0.0)
    two = second.create(configmaps(second), "default", cm("a"), 0.0)
    assert one == two
    other = SimApiServer(seed=8)
    assert other.create(configmaps(other), "default", cm("a"), 0.0) != one


def test_stale_update_conflicts_and_noop_keeps_the_version(server: SimApiServer) -> None:
    res = configmaps(server)
    first = server.create(res, "default", cm("a", data={"k": "1"}), 0.0)
    second = server.update(res, "default", "a", {**first, "data": {"k": "2"}}, 1.0)
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    with raises(409, "Conflict") as check:
        server.update(res, "default", "a", {**first, "data": {"k": "3"}}, 2.0)
    assert check.error.message == (
        'Operation cannot be fulfilled on configmaps "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    writes = server.writes
    again = server.update(res, "default", "a", second, 3.0)
    assert again == second and server.writes == writes
    unconditional = cm("a", data={"k": "4"})
    assert server.update(res, "default", "a", unconditional, 4.0)["data"] == {"k": "4"}


def test_custom_resource_update_needs_a_resource_version(server: SimApiServer) -> None:
    server.create(WIDGETS, "default", widget("w"), 0.0)
    with raises(422, "Invalid") as check:
        server.update(WIDGETS, "default", "w", widget("w", 2), 1.0)
    assert check.error.message == (
        'widgets.example.com "w" is invalid: metadata.resourceVersion: Invalid value: 0: '
        "must be specified for an update"
    )


def test_generation_follows_spec_changes_only(server: SimApiServer) -> None:
    created = server.create(WIDGETS, "default", {**widget("w"), "status": {"x": 1}}, 0.0)
    assert created["metadata"]["generation"] == 1
    assert "status" not in created  # dropped on create with a status subresource
    labelled = dict(created, metadata={**created["metadata"], "labels": {"a": "b"}})
    relabelled = server.update(WIDGETS, "default", "w", labelled, 1.0)
    assert relabelled["metadata"]["generation"] == 1
    status = server.update(
        WIDGETS, "default", "w", {**relabelled, "status": {"x": 2}}, 2.0, subresource="status"
    )
    assert status["status"] == {"x": 2} and status["metadata"]["generation"] == 1
    ignored = server.update(WIDGETS, "default", "w", {**status, "status": {"x": 9}}, 3.0)
    assert ignored["status"] == {"x": 2}  # the main resource cannot write status
    bigger = server.update(WIDGETS, "default", "w", {**ignored, "spec": {"size": 5}}, 4.0)
    assert bigger["metadata"]["generation"] == 2
    # Without a status subresource, a status change is a change of the object.
    plain = server.create(
        PLAIN,
        "default",
        {"apiVersion": "example.com/v1", "kind": "Plain", "metadata": {"name": "p"}},
        0.0,
    )
    changed = server.update(PLAIN, "default", "p", {**plain, "status": {"x": 1}}, 1.0)
    assert changed["metadata"]["generation"] == 2 and changed["status"] == {"x": 1}


def test_status_route_of_a_resource_without_one(server: SimApiServer) -> None:
    res = configmaps(server)
    created = server.create(res, "default", cm("a"), 0.0)
    with raises(404, "NotFound") as check:
        server.update(res, "default", "a", created, 1.0, subresource="status")
    assert check.error.status()["details"] == {}


def test_finalizers_hold_a_deletion_until_released(server: SimApiServer) -> None:
    server.create(WIDGETS, "default", widget("w", finalizers=["example.com/x"]), 0.0)
    marked = server.delete(WIDGETS, "default", "w", 5.0)
    meta = marked["metadata"]
    assert meta["deletionTimestamp"] == "2026-01-01T00:00:05Z"
    assert meta["deletionGracePeriodSeconds"] == 0 and meta["generation"] == 2
    assert server.delete(WIDGETS, "default", "w", 6.0) == marked  # nothing changes
    with raises(409, "AlreadyExists") as check:
        server.create(WIDGETS, "default", widget("w"), 7.0)
    assert check.error.message.startswith("object is being deleted: ")
    released = server.patch(
        WIDGETS,
        "default",
        "w",
        {"metadata": {"finalizers": None}},
        8.0,
        content_type="application/merge-patch+json",
    )
    assert released["metadata"]["resourceVersion"] == meta["resourceVersion"]
    with raises(404, "NotFound"):
        server.get(WIDGETS, "default", "w")


@pytest.mark.parametrize("kind", ["ConfigMap", "Widget"])
def test_no_finalizer_is_added_to_an_object_being_deleted(server: SimApiServer, kind: str) -> None:
    # kube-apiserver 1.37's 422: one cause for a ConfigMap, the same cause twice for a
    # custom resource (its strategy validates the metadata again); the object is kept.
    if kind == "ConfigMap":
        res, group, body = configmaps(server), "", cm("o", metadata={"finalizers": ["x.io/a"]})
    else:
        res, group, body = WIDGETS, "example.com", widget("o", finalizers=["x.io/a"])
    server.create(res, "default", body, 0.0)
    marked = server.delete(res, "default", "o", 1.0)
    patch = {"metadata": {"finalizers": ["x.io/c", "x.io/a", "x.io/b"]}}
    with raises(422, "Invalid") as check:
        server.patch(res, "default", "o", patch, 2.0, content_type="application/merge-patch+json")
    detail = (
        "Forbidden: no new finalizers can be added if the object is being deleted, "
        'found new finalizers []string{"x.io/b", "x.io/c"}'
    )
    cause = {"reason": "FieldValueForbidden", "message": detail, "field": "metadata.finalizers"}
    what = f"{kind}.{group}" if group else kind
    assert check.error.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{what} "o" is invalid: metadata.finalizers: {detail}',
        "reason": "Invalid",
        "details": {
            "name": "o",
            **({"group": group} if group else {}),
            "kind": kind,
            "causes": [cause, cause] if group else [cause],
        },
        "code": 422,
    }
    assert server.get(res, "default", "o") == marked
    # Other built-in kinds are not checked against kube-apiserver: refused.
    secrets = server.resource(GroupVersionResource("", "v1", "secrets"))
    server.create(
        secrets, "default", {**cm("s", metadata={"finalizers": ["x.io/a"]}), "kind": "Secret"}, 0.0
    )
    server.delete(secrets, "default", "s", 1.0)
    with pytest.raises(NotModelled, match="adding finalizers"):
        server.patch(
            secrets, "default", "s", patch, 2.0, content_type="application/merge-patch+json"
        )


def test_delete_without_finalizers_answers_a_status(server: SimApiServer) -> None:
    created = server.create(WIDGETS, "default", widget("w"), 0.0)
    assert server.delete(WIDGETS, "default", "w", 1.0) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": "w",
            "group": "example.com",
            "kind": "widgets",
            "uid": created["metadata"]["uid"],
        },
    }


def test_delete_preconditions(server: SimApiServer) -> None:
    res = configmaps(server)
    created = server.create(res, "default", cm("a"), 0.0)
    with raises(409, "Conflict") as check:
        server.delete(res, "default", "a", 1.0, precondition_uid="other")
    assert "Precondition failed: UID in precondition: other" in check.error.message
    with raises(409, "Conflict"):
        server.delete(res, "default", "a", 1.0, precondition_resource_version="1")
    rv = created["metadata"]["resourceVersion"]
    server.delete(res, "default", "a", 1.0, precondition_resource_version=rv)


def owned_by(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "ownerReferences": [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    }


def test_garbage_collection_background(server: SimApiServer) -> None:
    owner = server.create(WIDGETS, "default", widget("owner"), 0.0)
    res = configmaps(server)
    server.create(res, "default", cm("child", metadata=owned_by(owner)), 1.0)
    other = server.create(WIDGETS, "default", widget("other"), 1.0)
    both = owned_by(owner)["ownerReferences"] + owned_by(other)["ownerReferences"]
    server.create(res, "default", cm("shared", metadata={"ownerReferences": both}), 1.0)
    server.delete(WIDGETS, "default", "owner", 2.0)
    with raises(404, "NotFound"):
        server.get(res, "default", "child")
    shared = server.get(res, "default", "shared")
    assert [r["name"] for r in shared["metadata"]["ownerReferences"]] == ["other"]


def test_garbage_collection_orphan_and_foreground(server: SimApiServer) -> None:
    res = configmaps(server)
    owner = server.create(WIDGETS, "default", widget("o1"), 0.0)
    server.create(res, "default", cm("kept", metadata=owned_by(owner)), 0.0)
    server.delete(WIDGETS, "default", "o1", 1.0, propagation_policy="Orphan")
    assert "ownerReferences" not in server.get(res, "default", "kept")["metadata"]
    with raises(404, "NotFound"):
        server.get(WIDGETS, "default", "o1")
    owner = server.create(WIDGETS, "default", widget("o2"), 2.0)
    server.create(
        res,
        "default",
        cm("held", metadata={**owned_by(owner), "finalizers": ["example.com/x"]}),
        2.0,
    )
    server.delete(WIDGETS, "default", "o2", 3.0, propagation_policy="Foreground")
    waiting = server.get(WIDGETS, "default", "o2")
    assert waiting["metadata"]["finalizers"] == ["foregroundDeletion"]
    held = server.get(res, "default", "held")
    assert "deletionTimestamp" in held["metadata"]
    server.update(
        res, "default", "held", {**held, "metadata": {**held["metadata"], "finalizers": []}}, 4.0
    )
    with raises(404, "NotFound"):
        server.get(WIDGETS, "default", "o2")


def test_garbage_collector_off_leaves_dependents(server: SimApiServer) -> None:
    bare = SimApiServer([WIDGETS], garbage_collector=False)
    owner = bare.create(WIDGETS, "default", widget("owner"), 0.0)
    bare.create(configmaps(bare), "default", cm("child", metadata=owned_by(owner)), 0.0)
    bare.delete(WIDGETS, "default", "owner", 1.0)
    assert bare.get(configmaps(bare), "default", "child")
    assert bare.collect_garbage(2.0) == 1
    with raises(404, "NotFound"):
        bare.get(configmaps(bare), "default", "child")


def names(document: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in document["items"]]


def test_label_and_field_selectors(server: SimApiServer) -> None:
    res = configmaps(server)
    for name, labels in (("a", {"tier": "web"}), ("b", {"tier": "db"}), ("c", {})):
        server.create(res, "default", cm(name, metadata={"labels": labels}), 0.0)
    select = lambda s: names(server.list(res, "default", label_selector=s))  # noqa: E731
    assert select("tier=web") == ["a"]
    assert select("tier==web") == ["a"]
    assert select("tier!=web") == ["b", "c"]
    assert select("tier in (web, db)") == ["a", "b"]
    assert select("tier notin (web)") == ["b", "c"]
    assert select("tier") == ["a", "b"]
    assert select("!tier") == ["c"]
    assert select("tier,tier!=db") == ["a"]
    fields = names(server.list(res, None, field_selector="metadata.name=b"))
    assert fields == ["b"]
    assert names(server.list(res, None, field_selector="metadata.namespace!=default")) == []
    with raises(400, "BadRequest"):
        server.list(res, "default", label_selector="tier in (web")
    with pytest.raises(NotModelled, match="spec.nodeName"):
        server.list(res, "default", field_selector="spec.nodeName=x")


def test_paged_list_is_a_snapshot(server: SimApiServer) -> None:
    res = configmaps(server)
    for name in "abcde":
        server.create(res, "default", cm(name), 0.0)
    first = server.list(res, "default", limit=2)
    assert names(first) == ["a", "b"]
    assert first["metadata"]["remainingItemCount"] == 3
    assert "apiVersion" not in first["items"][0]  # typed list items carry no kind
    server.delete(res, "default", "c", 1.0)
    server.create(res, "default", cm("bb"), 1.0)
    token = first["metadata"]["continue"]
    second = server.list(res, "default", limit=2, continue_token=token)
    assert names(second) == ["c", "d"]  # as of the first page: c still there, bb not yet
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    third = server.list(res, "default", limit=2, continue_token=second["metadata"]["continue"])
    assert names(third) == ["e"] and "continue" not in third["metadata"]
    server.compact()
    with raises(410, "Expired"):
        server.list(res, "default", limit=2, continue_token=token)
    custom_list = server.list(WIDGETS, "default")
    assert custom_list["metadata"]["continue"] == ""


def test_list_at_an_exact_resource_version(server: SimApiServer) -> None:
    res = configmaps(server)
    server.create(res, "default", cm("a"), 0.0)
    rv = str(server.resource_version)
    server.create(res, "default", cm("b"), 0.0)
    exact = server.list(res, "default", resource_version=rv, resource_version_match="Exact")
    assert names(exact) == ["a"] and exact["metadata"]["resourceVersion"] == rv
    newer = server.list(res, "default", resource_version=rv)
    assert names(newer) == ["a", "b"]


def lines(watch: Any, now: float) -> list[tuple[str, str]]:
    return [
        (
            line.type,
            line.object["metadata"].get("name", line.object["metadata"].get("resourceVersion")),
        )
        for line in watch.take(now, 0)
    ]


def test_watch_from_a_version_with_selector_transitions(server: SimApiServer) -> None:
    res = configmaps(server)
    server.create(res, "default", cm("a", metadata={"labels": {"x": "1"}}), 0.0)
    rv = str(server.resource_version)
    watch = server.watch(res, "default", 0.0, resource_version=rv, label_selector="x=1")
    assert lines(watch, 0.0) == []
    current = server.get(res, "default", "a")
    server.create(res, "default", cm("b", metadata={"labels": {"x": "1"}}), 1.0)
    moved = server.update(
        res,
        "default",
        "a",
        {**current, "metadata": {**current["metadata"], "labels": {"x": "2"}}},
        1.0,
    )
    server.update(
        res, "default", "a", {**moved, "metadata": {**moved["metadata"], "labels": {"x": "1"}}}, 1.0
    )
    server.create(res, "kube-system", cm("c", metadata={"labels": {"x": "1"}}), 1.0)
    server.delete(res, "default", "b", 2.0)
    assert lines(watch, 2.0) == [
        ("ADDED", "b"),
        ("DELETED", "a"),  # left the selection
        ("ADDED", "a"),  # came back
        ("DELETED", "b"),
    ]


def test_watch_initial_state_bookmarks_and_deadline(server: SimApiServer) -> None:
    res = configmaps(server)
    server.create(res, "default", cm("a"), 0.0)
    watch = server.watch(res, "default", 10.0, timeout_seconds=100, allow_watch_bookmarks=True)
    assert [line.type for line in watch.take(10.0, server.resource_version)] == ["ADDED"]
    assert watch.next_deadline() == 70.0
    assert [line.type for line in watch.take(70.0, server.resource_version)] == ["BOOKMARK"]
    assert watch.next_deadline() == 108.0  # two seconds before the deadline
    assert [line.type for line in watch.take(108.0, server.resource_version)] == ["BOOKMARK"]
    assert watch.take(110.0, server.resource_version) == [] and watch.closed


def test_streaming_list_ends_with_the_initial_events_bookmark(server: SimApiServer) -> None:
    res = configmaps(server)
    server.create(res, "default", cm("a"), 0.0)
    watch = server.watch(
        res,
        "default",
        0.0,
        resource_version="",
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
    )
    taken = watch.take(0.0, server.resource_version)
    assert [line.type for line in taken] == ["ADDED", "BOOKMARK"]
    assert taken[1].object["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_watch_from_a_compacted_version_is_410(server: SimApiServer) -> None:
    res = configmaps(server)
    server.create(res, "default", cm("a"), 0.0)
    old = str(server.resource_version - 1)
    server.compact()
    watch = server.watch(res, "default", 0.0, resource_version=old)
    (line,) = watch.take(0.0, server.resource_version)
    assert line.type == "ERROR"
    assert (line.object["code"], line.object["reason"]) == (410, "Expired")
    assert line.object["message"].startswith(f"too old resource version: {old} (")
    assert watch.closed


def test_bounded_history_compacts_itself() -> None:
    server = SimApiServer(history_limit=3)
    res = configmaps(server)
    start = server.resource_version
    for name in "abcde":
        server.create(res, "default", cm(name), 0.0)
    assert server.compacted_resource_version > start
    (line,) = server.watch(res, None, 0.0, resource_version=str(start)).take(0.0, 0)
    assert line.type == "ERROR"


def test_json_patch_and_merge_patch(server: SimApiServer) -> None:
    res = configmaps(server)
    server.create(res, "default", cm("a", data={"k": "v"}), 0.0)
    merged = server.patch(
        res,
        "default",
        "a",
        {"data": {"k": None, "n": "1"}},
        1.0,
        content_type="application/merge-patch+json",
    )
    assert merged["data"] == {"n": "1"}
    patched = server.patch(
        res,
        "default",
        "a",
        [{"op": "add", "path": "/data/m", "value": "2"}],
        2.0,
        content_type="application/json-patch+json",
    )
    assert patched["data"] == {"n": "1", "m": "2"}
    with raises(409, "Conflict"):
        server.patch(
            res,
            "default",
            "a",
            {"metadata": {"resourceVersion": "1"}},
            3.0,
            content_type="application/merge-patch+json",
        )
    with pytest.raises(NotModelled, match="strategic-merge-patch"):
        server.patch(
            res, "default", "a", {}, 3.0, content_type="application/strategic-merge-patch+json"
        )


def test_generate_name_and_invalid_names(server: SimApiServer) -> None:
    res = configmaps(server)
    made = server.create(res, "default", cm("", metadata={"generateName": "web-"}), 0.0)
    assert made["metadata"]["name"].startswith("web-") and len(made["metadata"]["name"]) == 9
    with raises(422, "Invalid") as check:
        server.create(res, "default", cm("Bad_Name"), 0.0)
    assert check.error.message.startswith('ConfigMap "Bad_Name" is invalid: metadata.name:')


def test_cluster_scoped_and_namespaces(server: SimApiServer) -> None:
    made = server.create(
        CLUSTERED,
        None,
        {"apiVersion": "example.com/v1", "kind": "Cluster", "metadata": {"name": "c"}},
        0.0,
    )
    assert "namespace" not in made["metadata"]
    namespaces = server.resource(GroupVersionResource("", "v1", "namespaces"))
    listed = names(server.list(namespaces, None))
    assert listed == ["default", "kube-node-lease", "kube-public", "kube-system"]
    ns = server.get(namespaces, None, "default")
    assert ns["status"] == {"phase": "Active"}
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "default"}


@pytest.mark.parametrize(
    ("request_", "feature"),
    [
        (Request("GET", "/api"), "discovery"),
        (Request("GET", "/api/v1/pods"), "pods"),
        (Request("GET", "/api/v1/namespaces/default/configmaps", (("dryRun", "All"),)), "dryRun"),
        (
            Request("DELETE", "/api/v1/namespaces/default/configmaps"),
            "DELETE on a collection",
        ),
    ],
)
def test_what_is_not_modelled_is_refused(
    server: SimApiServer, request_: Request, feature: str
) -> None:
    with pytest.raises(NotModelled, match=feature):
        handle_request(server, request_, 0.0)


def test_rest_surface_answers_status_bodies(server: SimApiServer) -> None:
    answer = handle_request(server, Request("GET", "/api/v1/namespaces/default/configmaps/x"), 0.0)
    assert not hasattr(answer, "take")
    assert answer.status_code == 404  # type: ignore[union-attr]
    assert json.loads(answer.body)["reason"] == "NotFound"  # type: ignore[union-attr]
    body = json.dumps(cm("x")).encode()
    created = handle_request(
        server, Request("POST", "/api/v1/namespaces/default/configmaps", body=body), 0.0
    )
    assert created.status_code == 201  # type: ignore[union-attr]


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE"])
def test_status_of_a_kind_without_the_subresource_is_not_found(
    server: SimApiServer, method: str
) -> None:
    # A CRD without subresources.status: the CRD handler answers NotFound naming the
    # object, for every verb and whether or not the object exists (kube-apiserver 1.37,
    # customresource_handler.go); a built-in kind has no such route at all.
    server.create(PLAIN, "default", {**widget("p"), "kind": "Plain"}, 0.0)
    body = json.dumps({"metadata": {"name": "p"}}).encode()
    headers = (("Content-Type", "application/merge-patch+json"),)
    for name in ("p", "absent"):
        path = f"/apis/example.com/v1/namespaces/default/plains/{name}/status"
        answer = handle_request(server, Request(method, path, (), headers, body), 1.0)
        assert answer.status_code == 404  # type: ignore[union-attr]
        assert json.loads(answer.body) == {  # type: ignore[union-attr]
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f'plains.example.com "{name}" not found',
            "reason": "NotFound",
            "details": {"name": name, "group": "example.com", "kind": "plains"},
            "code": 404,
        }
    server.create(configmaps(server), "default", cm("c"), 0.0)
    path = "/api/v1/namespaces/default/configmaps/c/status"
    answer = handle_request(server, Request(method, path, (), headers, body), 1.0)
    assert answer.status_code == 404  # type: ignore[union-attr]
    assert json.loads(answer.body)["message"] == (  # type: ignore[union-attr]
        "the server could not find the requested resource"
    )


def test_a_new_propagation_policy_replaces_the_old_one() -> None:
    bare = SimApiServer([WIDGETS], garbage_collector=False)
    bare.create(WIDGETS, "default", widget("w", finalizers=["example.com/x"]), 0.0)
    orphaned = bare.delete(WIDGETS, "default", "w", 1.0, propagation_policy="Orphan")
    assert orphaned["metadata"]["finalizers"] == ["example.com/x", "orphan"]
    foreground = bare.delete(WIDGETS, "default", "w", 2.0, propagation_policy="Foreground")
    assert foreground["metadata"]["finalizers"] == ["example.com/x", "foregroundDeletion"]
    assert bare.delete(WIDGETS, "default", "w", 3.0) == foreground  # no policy: kept
    background = bare.delete(WIDGETS, "default", "w", 4.0, propagation_policy="Background")
    assert background["metadata"]["finalizers"] == ["example.com/x"]


@dataclasses.dataclass(slots=True)
class GadgetSpec:
    """A gadget's spec."""

    replicas: int = 1


@custom_resource(group="example.com", version="v1")
@dataclasses.dataclass(slots=True)
class Gadget:
    """A declared custom resource."""

    spec: GadgetSpec = dataclasses.field(default_factory=GadgetSpec)
    status: dict[str, str] | None = None
    metadata: MetadataField = MetadataField()


def test_a_declared_class_is_served_and_its_schema_guarded() -> None:
    server = SimApiServer([Gadget])
    gadgets = server.resource(GroupVersionResource("example.com", "v1", "gadgets"))
    assert gadgets.status_subresource and gadgets.custom
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "spec": {"replicas": 2},
    }
    assert server.create(gadgets, "default", body, 0.0)["metadata"]["generation"] == 1
    defaulted = {**body, "metadata": {"name": "h"}, "spec": {}}
    with pytest.raises(NotModelled, match="default or prune"):
        server.create(gadgets, "default", defaulted, 0.0)
    with pytest.raises(NotModelled, match="refuses"):
        server.create(gadgets, "default", {**body, "spec": {"replicas": "two"}}, 0.0)


def test_a_class_with_validation_rules_is_refused() -> None:
    from examples.widgets.widget_api import Widget

    with pytest.raises(NotModelled, match="CEL"):
        SimApiServer([Widget])


EVENTS = GroupVersionResource("events.k8s.io", "v1", "events")


def event(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "w.1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "example.com/widgets",
        "reportingInstance": "widgets-1",
        "action": "Reconcile",
        "reason": "Scaled",
        "regarding": {"kind": "Widget", "name": "w", "namespace": "default"},
        "note": "3 ready",
        "type": "Normal",
    }
    body.update(changes)
    return body


def test_an_event_as_a_recorder_writes_it_is_created_and_its_series_patched(
    server: SimApiServer,
) -> None:
    events = server.resource(EVENTS)
    created = server.create(events, "default", event(), 0.0)
    assert "generation" not in created["metadata"]  # no generation for a built-in Event
    series = {"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}}
    patched = server.patch(
        events, "default", "w.1", series, 1.0, content_type="application/merge-patch+json"
    )
    assert patched["series"]["count"] == 2


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"eventTime": ""}, "eventTime"),
        ({"reason": "x" * 129}, "reason"),
        ({"type": "Info"}, "type"),
        ({"note": "n" * 1025}, "note"),
        ({"series": {"count": 1, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}}, "series"),
    ],
)
def test_an_event_validation_would_refuse_is_not_modelled(
    server: SimApiServer, changes: dict[str, Any], why: str
) -> None:
    with pytest.raises(NotModelled, match=why):
        server.create(server.resource(EVENTS), "default", event(**changes), 0.0)
