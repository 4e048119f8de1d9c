"""Discovery decoders and the discovery walk."""

import copy
import json
from typing import Any

import pytest
from discovery_samples import (
    AGGREGATED_API,
    AGGREGATED_APIS,
    API_GROUP_LIST,
    API_VERSIONS,
    APPS_V1,
    COORDINATION_V1,
    COORDINATION_V1BETA1,
    CORE_V1,
)

from kubemoon_core import GroupVersion, GroupVersionResource, Response, Scope
from kubemoon_core.errors import (
    DecodeError,
    LocalProtocolError,
    ResourceNotServed,
    ServiceUnavailable,
    Unauthorized,
)
from kubemoon_core.lowlevel import (
    AGGREGATED_DISCOVERY_ACCEPT,
    Discovery,
    DiscoveryState,
    decode_aggregated_discovery,
    decode_api_group_list,
    decode_api_resource_list,
    decode_api_versions,
)


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_api_versions() -> None:
    assert decode_api_versions(body(API_VERSIONS)).versions == ("v1",)


def test_group_list_keeps_server_order() -> None:
    groups = decode_api_group_list(API_GROUP_LIST).groups
    assert [g.name for g in groups] == ["apps", "coordination.k8s.io"]
    coordination = groups[1]
    assert coordination.versions == (
        GroupVersion("coordination.k8s.io", "v1"),
        GroupVersion("coordination.k8s.io", "v1beta1"),
    )
    assert coordination.preferred_version == GroupVersion("coordination.k8s.io", "v1")


def test_preferred_version_may_be_absent_but_must_belong() -> None:
    doc = copy.deepcopy(API_GROUP_LIST)
    del doc["groups"][0]["preferredVersion"]
    assert decode_api_group_list(doc).groups[0].preferred_version is None
    doc["groups"][1]["preferredVersion"] = {
        "groupVersion": "coordination.k8s.io/v2",
        "version": "v2",
    }
    with pytest.raises(DecodeError) as info:
        decode_api_group_list(doc)
    assert info.value.path == "groups[1].preferredVersion.groupVersion"
    doc["groups"][1]["preferredVersion"] = {"groupVersion": "apps/v1", "version": "v1"}
    with pytest.raises(DecodeError, match="does not match") as info:
        decode_api_group_list(doc)
    assert info.value.path == "groups[1].preferredVersion.groupVersion"


def test_group_version_must_match_group_and_version() -> None:
    doc = copy.deepcopy(API_GROUP_LIST)
    doc["groups"][0]["versions"][0]["version"] = "v2"
    with pytest.raises(DecodeError) as info:
        decode_api_group_list(doc)
    assert info.value.path == "groups[0].versions[0].groupVersion"
    doc["groups"][0]["name"] = ""
    with pytest.raises(DecodeError, match="empty name"):
        decode_api_group_list(doc)


def test_resource_list_attaches_subresources() -> None:
    core = decode_api_resource_list(body(CORE_V1))
    assert core.group_version == GroupVersion("", "v1")
    names = [r.gvr.resource for r in core.resources]
    assert names == ["configmaps", "namespaces", "pods"]
    ns = core.resources[1]
    assert ns.scope is Scope.CLUSTER
    assert ns.subresources == ("finalize", "status")
    cm = core.resources[0]
    assert (cm.kind, cm.singular_name, cm.short_names, cm.namespaced) == (
        "ConfigMap",
        "configmap",
        ("cm",),
        True,
    )
    assert "watch" in cm.verbs
    apps = decode_api_resource_list(APPS_V1)
    (deploy,) = apps.resources
    assert deploy.gvr == GroupVersionResource("apps", "v1", "deployments")
    assert deploy.subresources == ("scale", "status")
    assert deploy.categories == ("all",)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d["resources"].append({**d["resources"][0], "name": "ghosts/status"}),
         "resources[5].name"),
        (lambda d: d["resources"].append({**d["resources"][0], "name": "pods/"}), "resources[5].name"),
        (lambda d: d["resources"][0].update(name=""), "resources[0].name"),
        (lambda d: d["resources"][0].update(name="Config_Maps"), "resources[0].name"),
        (lambda d: d.update(groupVersion="/v1"), "groupVersion"),
        (lambda d: d.update(kind="APIGroupList"), "kind"),
        (lambda d: d["resources"][0].update(namespaced=1), "resources[0].namespaced"),
        (lambda d: d["resources"][0].update(verbs="get"), "resources[0].verbs"),
        (lambda d: d["resources"][0].update(group=1), "resources[0].group"),
    ],
)  # fmt: skip
def test_resource_list_errors_name_the_path(mutate: Any, path: str) -> None:
    doc = copy.deepcopy(CORE_V1)
    mutate(doc)
    with pytest.raises(DecodeError) as info:
        decode_api_resource_list(doc)
    assert info.value.path == path
    assert path in str(info.value)


def test_documents_must_be_json_objects() -> None:
    with pytest.raises(DecodeError, match="invalid JSON"):
        decode_api_versions(b"{")
    with pytest.raises(DecodeError) as info:
        decode_api_versions(b"[]")
    assert info.value.path == "$"
    with pytest.raises(DecodeError) as info:
        decode_api_versions({"versions": ["v1", "/x"]})
    assert info.value.path == "versions[1]"


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999999"])
def test_discovery_documents_with_non_finite_numbers_are_refused(number: bytes) -> None:
    # The standard-library backend: json.loads alone would accept these.
    with pytest.raises(DecodeError, match="invalid JSON"):
        decode_api_versions(b'{"kind": "APIVersions", "versions": ["v1"], "x": ' + number + b"}")


def test_aggregated_discovery() -> None:
    doc = decode_aggregated_discovery(body(AGGREGATED_APIS))
    assert [g.name for g in doc.groups] == ["apps", "kubemoon.dev"]
    assert doc.groups[0].preferred_version == GroupVersion("apps", "v1")
    deploy, mirror = doc.resources
    assert deploy.gvr == GroupVersionResource("apps", "v1", "deployments")
    assert deploy.subresources == ("scale", "status")
    assert (deploy.kind, deploy.singular_name, deploy.short_names) == (
        "Deployment",
        "deployment",
        ("deploy",),
    )
    assert mirror.scope is Scope.NAMESPACED
    assert doc.stale_group_versions == (GroupVersion("kubemoon.dev", "v1alpha1"),)
    core = decode_aggregated_discovery(AGGREGATED_API)
    assert core.groups[0].name == ""
    assert [r.gvr.resource for r in core.resources] == ["configmaps", "namespaces"]
    assert core.resources[1].scope is Scope.CLUSTER


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d["items"][0]["versions"][0]["resources"][0].update(scope="Galaxy"),
         "items[0].versions[0].resources[0].scope"),
        (lambda d: d["items"][0]["versions"][0].update(freshness="Old"),
         "items[0].versions[0].freshness"),
        (lambda d: d["items"][0]["versions"][0].update(version="V1"), "items[0].versions[0].version"),
        (lambda d: d["items"][0]["versions"][0]["resources"][0].update(resource="Deploy"),
         "items[0].versions[0].resources[0].resource"),
        (lambda d: d["items"][0]["versions"][0]["resources"][0]["subresources"][0].update(
            subresource=""), "items[0].versions[0].resources[0].subresources[0].subresource"),
    ],
)  # fmt: skip
def test_aggregated_errors_name_the_path(mutate: Any, path: str) -> None:
    doc = copy.deepcopy(AGGREGATED_APIS)
    mutate(doc)
    with pytest.raises(DecodeError) as info:
        decode_aggregated_discovery(doc)
    assert info.value.path == path


def test_aggregated_version_without_resources_is_fine() -> None:
    doc = copy.deepcopy(AGGREGATED_APIS)
    del doc["items"][0]["versions"][0]["resources"]
    del doc["items"][1]["versions"][0]["resources"][0]["responseKind"]
    del doc["items"][1]["versions"][0]["resources"][0]["subresources"]
    decoded = decode_aggregated_discovery(doc)
    assert [r.kind for r in decoded.resources] == [""]


def ok(doc: Any) -> Response:
    return Response(200, (("Content-Type", "application/json"),), body(doc))


def test_walk_with_aggregated_discovery() -> None:
    walk = Discovery()
    requests = walk.next_requests()
    assert [r.path for r in requests] == ["/api", "/apis"]
    assert all(r.header("Accept") == AGGREGATED_DISCOVERY_ACCEPT for r in requests)
    assert walk.next_requests() == []
    with pytest.raises(LocalProtocolError, match="not done"):
        _ = walk.resources
    # Answers may come in any order; the result keeps the core group first.
    walk.receive_response(requests[1], ok(AGGREGATED_APIS))
    walk.receive_response(requests[0], ok(AGGREGATED_API))
    assert walk.state is DiscoveryState.DONE
    assert [r.gvr.resource for r in walk.resources] == [
        "configmaps",
        "namespaces",
        "deployments",
        "configmirrors",
    ]
    assert walk.stale_group_versions == (GroupVersion("kubemoon.dev", "v1alpha1"),)
    assert walk.next_requests() == []
    with pytest.raises(LocalProtocolError, match="no discovery request"):
        walk.receive_response(requests[0], ok(AGGREGATED_API))


def test_walk_falls_back_to_legacy_documents_and_skips_failed_groups() -> None:
    walk = Discovery(aggregated=False)
    api, apis = walk.next_requests()
    assert api.header("Accept") == "application/json"
    walk.receive_response(apis, ok(API_GROUP_LIST))
    walk.receive_response(api, ok(API_VERSIONS))
    second = walk.next_requests()
    assert [r.path for r in second] == [
        "/apis/apps/v1",
        "/apis/coordination.k8s.io/v1",
        "/apis/coordination.k8s.io/v1beta1",
        "/api/v1",
    ]
    by_path = {r.path: r for r in second}
    walk.receive_response(by_path["/api/v1"], ok(CORE_V1))
    walk.receive_response(by_path["/apis/apps/v1"], ok(APPS_V1))
    walk.receive_response(by_path["/apis/coordination.k8s.io/v1"], ok(COORDINATION_V1))
    assert walk.state is DiscoveryState.RUNNING
    walk.receive_response(
        by_path["/apis/coordination.k8s.io/v1beta1"],
        Response(503, (), b'{"kind":"Status","code":503,"reason":"ServiceUnavailable"}'),
    )
    assert walk.state is DiscoveryState.DONE
    assert [str(r.gvr) for r in walk.resources] == [
        "configmaps.v1",
        "namespaces.v1",
        "pods.v1",
        "deployments.v1.apps",
        "leases.v1.coordination.k8s.io",
    ]
    failed = walk.failed_group_versions[GroupVersion("coordination.k8s.io", "v1beta1")]
    assert isinstance(failed, ServiceUnavailable)
    assert COORDINATION_V1BETA1["groupVersion"] == "coordination.k8s.io/v1beta1"


def test_walk_fails_on_a_failed_root_and_stays_failed() -> None:
    walk = Discovery()
    api, _ = walk.next_requests()
    with pytest.raises(Unauthorized):
        walk.receive_response(api, Response(401, (), b""))
    assert walk.state is DiscoveryState.FAILED
    assert walk.next_requests() == []


def test_walk_fails_on_a_malformed_document() -> None:
    walk = Discovery()
    api, _ = walk.next_requests()
    with pytest.raises(DecodeError):
        walk.receive_response(api, ok({"kind": "APIVersions", "versions": 3}))
    assert walk.state is DiscoveryState.FAILED
    legacy = Discovery(aggregated=False)
    api, _ = legacy.next_requests()
    legacy.receive_response(api, ok(API_VERSIONS))
    (core,) = legacy.next_requests()
    with pytest.raises(DecodeError):
        legacy.receive_response(core, ok({"kind": "APIResourceList"}))
    assert legacy.state is DiscoveryState.FAILED


def test_string_lists_name_the_bad_item() -> None:
    doc = copy.deepcopy(CORE_V1)
    doc["resources"][0]["shortNames"] = ["cm", 7]
    with pytest.raises(DecodeError) as info:
        decode_api_resource_list(doc)
    assert info.value.path == "resources[0].shortNames[1]"


def test_a_group_version_the_server_stopped_serving_is_named_in_its_error() -> None:
    walk = Discovery(aggregated=False)
    api, apis = walk.next_requests()
    walk.receive_response(apis, ok(API_GROUP_LIST))
    walk.receive_response(api, ok(API_VERSIONS))
    answers = {
        "/api/v1": ok(CORE_V1),
        "/apis/apps/v1": Response(404, (), b"404 page not found\n"),
        "/apis/coordination.k8s.io/v1": ok(COORDINATION_V1),
        "/apis/coordination.k8s.io/v1beta1": ok(COORDINATION_V1BETA1),
    }
    for request in walk.next_requests():
        walk.receive_response(request, answers[request.path])
    assert walk.state is DiscoveryState.DONE
    failed = walk.failed_group_versions[GroupVersion("apps", "v1")]
    assert isinstance(failed, ResourceNotServed)
    assert (failed.group, failed.version) == ("apps", "v1")
    assert "apps/v1" in str(failed)
