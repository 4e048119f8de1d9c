"""Resources, kinds, keys and paths."""

import pytest

from kubemoon_core import (
    APIResource,
    GroupVersion,
    GroupVersionKind,
    GroupVersionResource,
    ObjectKey,
    OwnerReference,
    ResourcePath,
    Scope,
)
from kubemoon_core.errors import DecodeError, LocalProtocolError
from kubemoon_core.objects import validate_name, validate_namespace

CM = GroupVersionResource("", "v1", "configmaps")
DEPLOY = GroupVersionResource("apps", "v1", "deployments")
NS = GroupVersionResource("", "v1", "namespaces")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (ResourcePath(CM), "/api/v1/configmaps"),
        (ResourcePath(CM, "ns"), "/api/v1/namespaces/ns/configmaps"),
        (ResourcePath(CM, "ns", "a"), "/api/v1/namespaces/ns/configmaps/a"),
        (ResourcePath(DEPLOY, "ns", "web", "scale"), "/apis/apps/v1/namespaces/ns/deployments/web/scale"),
        (ResourcePath(DEPLOY), "/apis/apps/v1/deployments"),
        (ResourcePath(NS, None, "team-a"), "/api/v1/namespaces/team-a"),
        (ResourcePath(NS, None, "team-a", "finalize"), "/api/v1/namespaces/team-a/finalize"),
    ],
)  # fmt: skip
def test_paths_render_and_parse_back(path: ResourcePath, expected: str) -> None:
    assert path.render() == expected
    assert str(path) == expected
    assert ResourcePath.parse(expected) == path


@pytest.mark.parametrize(
    "bad",
    ["", ".", "..", "a/b", "a?b", "a#b", "a%2F", "a b", "é", "x" * 254, "a\x00"],
)
def test_names_that_could_change_the_url_are_rejected(bad: str) -> None:
    with pytest.raises(LocalProtocolError):
        validate_name(bad)
    with pytest.raises(LocalProtocolError):
        ResourcePath(CM, "ns", bad)


def test_names_allow_the_characters_kubernetes_uses() -> None:
    for name in ("system:masters", "a.b-c", "Role_1", "x" * 253):
        assert validate_name(name) == name


@pytest.mark.parametrize("bad", ["", "A", "-a", "a-", "a.b", "a" * 64, "a/b"])
def test_namespaces_must_be_dns_labels(bad: str) -> None:
    with pytest.raises(LocalProtocolError, match="namespace"):
        validate_namespace(bad)


def test_non_strings_are_rejected_with_their_type() -> None:
    with pytest.raises(LocalProtocolError, match="int"):
        validate_name(3)


def test_subresource_needs_a_name_and_namespaces_take_no_namespace() -> None:
    with pytest.raises(LocalProtocolError, match="subresource"):
        ResourcePath(CM, "ns", None, "status")
    with pytest.raises(LocalProtocolError, match="cluster-scoped"):
        ResourcePath(NS, "ns", "x")


@pytest.mark.parametrize(
    "bad",
    ["", "/", "/api", "/api/v1", "/apis/apps", "/api/v1/a/b/c/d", "api/v1/pods", "/x/v1/pods"],
)
def test_parse_rejects_what_is_not_a_resource_path(bad: str) -> None:
    with pytest.raises(LocalProtocolError):
        ResourcePath.parse(bad)


def test_group_version_strings() -> None:
    assert GroupVersion.parse("v1") == GroupVersion("", "v1")
    assert GroupVersion.parse("apps/v1").api_path == "/apis/apps/v1"
    assert GroupVersion("", "v1").api_path == "/api/v1"
    assert GroupVersion("apps", "v1").api_version == "apps/v1"
    assert GroupVersion("", "v1").api_version == "v1"
    for bad in ("/v1", "Apps/v1", "apps/"):
        with pytest.raises(LocalProtocolError):
            GroupVersion.parse(bad)
    with pytest.raises(LocalProtocolError):
        GroupVersion.parse(None)  # type: ignore[arg-type]


def test_gvr_and_gvk() -> None:
    assert str(DEPLOY) == "deployments.v1.apps"
    assert str(CM) == "configmaps.v1"
    assert DEPLOY.group_version == GroupVersion("apps", "v1")
    gvk = GroupVersionKind.of({"apiVersion": "apps/v1", "kind": "Deployment"})
    assert gvk == GroupVersionKind("apps", "v1", "Deployment")
    assert gvk.api_version == "apps/v1"
    assert GroupVersionKind("", "v1", "Pod").api_version == "v1"
    with pytest.raises(LocalProtocolError):
        GroupVersionKind.of({"kind": "Pod"})
    with pytest.raises(LocalProtocolError):
        GroupVersionKind("", "v1", "not a kind")
    with pytest.raises(LocalProtocolError):
        GroupVersionResource("", "v1", "Pods")


def test_api_resource_properties() -> None:
    r = APIResource(DEPLOY, "Deployment", Scope.NAMESPACED)
    assert r.namespaced
    assert r.gvk == GroupVersionKind("apps", "v1", "Deployment")
    assert not APIResource(NS, "Namespace", Scope.CLUSTER).namespaced


def test_object_keys() -> None:
    key = ObjectKey.of({"metadata": {"namespace": "ns", "name": "a"}})
    assert str(key) == "ns/a"
    assert ObjectKey.parse("ns/a") == key
    cluster = ObjectKey.of({"metadata": {"name": "node-1"}})
    assert str(cluster) == "node-1"
    assert ObjectKey.parse("node-1") == cluster
    assert sorted([key, cluster]) == [cluster, key]
    with pytest.raises(LocalProtocolError):
        ObjectKey.parse("ns/")


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ({}, "metadata"),
        ({"metadata": []}, "metadata"),
        ({"metadata": {}}, "metadata.name"),
        ({"metadata": {"name": ""}}, "metadata.name"),
        ({"metadata": {"name": "a", "namespace": 1}}, "metadata.namespace"),
    ],
)
def test_object_keys_of_malformed_objects_name_the_field(obj: dict[str, object], path: str) -> None:
    with pytest.raises(DecodeError) as info:
        ObjectKey.of(obj)
    assert info.value.path == path


def test_owner_references_skip_malformed_entries() -> None:
    obj = {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "kubemoon.dev/v1alpha1", "kind": "ConfigMirror", "name": "m",
                 "uid": "u1", "controller": True},
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u2"},
                {"apiVersion": "v1", "kind": "Pod", "name": 3, "uid": "u3"},
                "junk",
            ]
        }
    }  # fmt: skip
    refs = OwnerReference.all_of(obj)
    assert refs == (
        OwnerReference("kubemoon.dev/v1alpha1", "ConfigMirror", "m", "u1", controller=True),
        OwnerReference("v1", "Pod", "p", "u2", controller=False),
    )
    assert OwnerReference.all_of({"metadata": {"ownerReferences": {}}}) == ()
    assert OwnerReference.all_of({}) == ()


def test_namespace_subresources_the_server_cannot_route_are_refused() -> None:
    with pytest.raises(LocalProtocolError, match="subresource"):
        ResourcePath(NS, None, "team-a", "scale")
