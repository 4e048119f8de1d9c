"""The RESTMapper: names and kinds to resources, freshness and refresh-once."""

import pytest
from discovery_samples import APPS_V1, COORDINATION_V1, COORDINATION_V1BETA1, CORE_V1

from kubemoon_core import GroupVersionKind, GroupVersionResource
from kubemoon_core.errors import LocalProtocolError, NoMatchError
from kubemoon_core.lowlevel import RefreshNeeded, RESTMapper, decode_api_resource_list

RESOURCES = [
    r
    for doc in (CORE_V1, APPS_V1, COORDINATION_V1, COORDINATION_V1BETA1)
    for r in decode_api_resource_list(doc).resources
]


def loaded(now: float = 0.0, **kwargs: float) -> RESTMapper:
    mapper = RESTMapper(**kwargs)
    mapper.load(RESOURCES, now)
    return mapper


@pytest.mark.parametrize(
    ("name", "gvr"),
    [
        ("configmaps", GroupVersionResource("", "v1", "configmaps")),
        ("configmap", GroupVersionResource("", "v1", "configmaps")),
        ("cm", GroupVersionResource("", "v1", "configmaps")),
        ("ConfigMap", GroupVersionResource("", "v1", "configmaps")),
        ("CM", GroupVersionResource("", "v1", "configmaps")),
        ("deploy", GroupVersionResource("apps", "v1", "deployments")),
        ("deployments.apps", GroupVersionResource("apps", "v1", "deployments")),
        ("deployment.v1.apps", GroupVersionResource("apps", "v1", "deployments")),
        ("Lease", GroupVersionResource("coordination.k8s.io", "v1", "leases")),
        ("leases.v1beta1.coordination.k8s.io",
         GroupVersionResource("coordination.k8s.io", "v1beta1", "leases")),
    ],
)  # fmt: skip
def test_names_resolve(name: str, gvr: GroupVersionResource) -> None:
    found = loaded().resolve(name, 1.0)
    assert not isinstance(found, RefreshNeeded)
    assert found.gvr == gvr


def test_kinds_resolve_to_the_first_discovered_version() -> None:
    mapper = loaded()
    found = mapper.resolve_kind(GroupVersionKind("coordination.k8s.io", "v1", "Lease"), 1.0)
    assert not isinstance(found, RefreshNeeded)
    assert found.gvr.version == "v1"
    beta = mapper.resolve_kind(GroupVersionKind("coordination.k8s.io", "v1beta1", "Lease"), 1.0)
    assert not isinstance(beta, RefreshNeeded)
    assert beta.gvr.version == "v1beta1"


def test_a_fresh_mapper_asks_for_discovery_and_expires_by_ttl() -> None:
    mapper = RESTMapper(ttl=60)
    assert mapper.needs_refresh(0.0)
    assert mapper.resolve("cm", 0.0) == RefreshNeeded("never loaded")
    assert mapper.resolve_kind(GroupVersionKind("", "v1", "Pod"), 0.0) == RefreshNeeded(
        "never loaded"
    )
    mapper.load(RESOURCES, 10.0)
    assert not mapper.needs_refresh(69.9)
    assert mapper.resolve("cm", 70.0) == RefreshNeeded("expired")
    assert mapper.resolve_kind(GroupVersionKind("", "v1", "Pod"), 70.0) == RefreshNeeded("expired")


def test_an_unknown_name_refreshes_once_then_is_not_found() -> None:
    mapper = loaded(retry_interval=30)
    assert isinstance(mapper.resolve("configmirrors", 1.0), RefreshNeeded)
    # Asked again before the refresh arrives: still a refresh, not a verdict.
    assert isinstance(mapper.resolve("configmirrors", 1.5), RefreshNeeded)
    mapper.load(RESOURCES, 2.0)
    with pytest.raises(NoMatchError, match="configmirrors"):
        mapper.resolve("configmirrors", 3.0)
    # Another unknown name gets its own refresh.
    assert isinstance(mapper.resolve("widgets", 3.0), RefreshNeeded)
    # Once the retry interval has passed since the last load, it may ask again.
    assert isinstance(mapper.resolve("configmirrors", 40.0), RefreshNeeded)


def test_unknown_kinds_follow_the_same_rule() -> None:
    mapper = loaded()
    gvk = GroupVersionKind("kubemoon.dev", "v1alpha1", "ConfigMirror")
    assert isinstance(mapper.resolve_kind(gvk, 1.0), RefreshNeeded)
    mapper.load(RESOURCES, 2.0)
    with pytest.raises(NoMatchError):
        mapper.resolve_kind(gvk, 3.0)


def test_qualified_names_that_do_not_match() -> None:
    mapper = loaded()
    assert isinstance(mapper.resolve("deployments.batch", 1.0), RefreshNeeded)
    assert isinstance(mapper.resolve("nothing.apps", 1.0), RefreshNeeded)


def test_bad_settings() -> None:
    with pytest.raises(LocalProtocolError):
        RESTMapper(ttl=0)
    with pytest.raises(LocalProtocolError):
        RESTMapper(retry_interval=-1)


def test_resources_without_kind_or_singular_resolve_by_plural_only() -> None:
    from kubemoon_core import APIResource, Scope

    bare = APIResource(GroupVersionResource("example.com", "v1", "widgets"), "", Scope.CLUSTER)
    mapper = RESTMapper()
    mapper.load([bare], 0.0)
    assert mapper.resolve("widgets", 1.0) is bare
    assert isinstance(mapper.resolve("", 1.0), RefreshNeeded)
