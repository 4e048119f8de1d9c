"""The typed client on every adapter (trio, asyncio, blocking) against the real
kube-apiserver: a kind names the resource and its scope, answers are decoded into it, and
a namespaced kind without a namespace is refused before anything is sent."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from adapter_driver import ADAPTERS, Adapter

from kubemoon_core import ListOptions
from kubemoon_core.builtin import CONFIGMAPS, ConfigMap, Namespace, ResourceQuota
from kubemoon_core.builtin.core_v1 import ResourceQuotaSpec
from kubemoon_core.errors import LocalProtocolError, NamespaceRequired, NotFound
from kubemoon_testing import ApiServer

pytestmark = pytest.mark.integration


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    driver = Adapter(request.param)
    yield driver
    driver.shutdown()


async def test_typed_verbs_answer_typed_objects(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    ns = kube_namespace
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    try:
        created = await adapter.call(
            client.create, ConfigMap(metadata={"name": "a", "namespace": ns}, data={"k": "1"})
        )
        assert isinstance(created, ConfigMap) and created.data == {"k": "1"}
        assert created.metadata.namespace == ns and created.metadata.uid
        got = await adapter.call(client.get, ConfigMap, "a", namespace=ns)
        assert isinstance(got, ConfigMap) and got.metadata.uid == created.metadata.uid
        # The dynamic form beside it: the same object as a mapping.
        raw = await adapter.call(client.get, CONFIGMAPS, "a", namespace=ns)
        assert raw["metadata"]["uid"] == created.metadata.uid and raw["data"] == {"k": "1"}
        got.data = {"k": "2"}
        replaced = await adapter.call(client.replace, got)
        assert isinstance(replaced, ConfigMap) and replaced.data == {"k": "2"}
        patched = await adapter.call(
            client.patch, ConfigMap, "a", {"data": {"p": "3"}}, namespace=ns
        )
        assert isinstance(patched, ConfigMap) and patched.data == {"k": "2", "p": "3"}
        applied = await adapter.call(
            client.apply,
            ConfigMap(metadata={"name": "s", "namespace": ns}, data={"owner": "me"}),
            field_manager="me",
        )
        assert isinstance(applied, ConfigMap) and applied.data == {"owner": "me"}
        for i in range(3):
            await adapter.call(client.create, ConfigMap(metadata={"name": f"p{i}"}), namespace=ns)
        pages = client.list(ConfigMap, namespace=ns, options=ListOptions(limit=2))
        items = await adapter.collect(pages)
        assert all(isinstance(item, ConfigMap) for item in items)
        names = [item.metadata.name for item in items if item.metadata.name != "kube-root-ca.crt"]
        assert names == ["a", "p0", "p1", "p2", "s"]
        assert pages.resource_version
        await adapter.call(client.delete, ConfigMap, "a", namespace=ns)
        with pytest.raises(NotFound):
            await adapter.call(client.get, ConfigMap, "a", namespace=ns)
        # A cluster-scoped kind needs no namespace.
        namespace = await adapter.call(client.get, Namespace, ns)
        assert isinstance(namespace, Namespace) and namespace.metadata.name == ns
    finally:
        await adapter.close(client)


async def test_scope_mistakes_of_a_kind_are_refused_locally(
    adapter: Adapter, kube_apiserver: ApiServer
) -> None:
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    try:
        quota = ResourceQuota(metadata={"name": "team"}, spec=ResourceQuotaSpec(hard={"pods": "1"}))
        writes = (
            functools.partial(client.create, quota),
            functools.partial(client.apply, quota, field_manager="me"),
            functools.partial(client.replace, quota),
        )
        for write in writes:
            with pytest.raises(NamespaceRequired) as caught:
                await adapter.call(write)
            assert "ResourceQuota 'team' (resourcequotas.v1) is namespaced" in str(caught.value)
        with pytest.raises(NamespaceRequired, match=r"ResourceQuota 'team'"):
            await adapter.call(client.get, ResourceQuota, "team")
        # A subresource answering another kind is no ResourceQuota.
        with pytest.raises(LocalProtocolError, match="subresource 'scale' answers another kind"):
            await adapter.call(
                client.get, ResourceQuota, "team", namespace="d", subresource="scale"
            )
        assert client.connection_count == 0  # nothing was sent
    finally:
        await adapter.close(client)
