"""A group, version or resource the real kube-apiserver does not serve raises
``ResourceNotServed`` on every adapter; a missing object of a served resource stays a plain
``NotFound``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from adapter_driver import ADAPTERS, Adapter

from kubemoon_core import GroupVersionResource
from kubemoon_core.errors import NotFound, ResourceNotServed
from kubemoon_testing import ApiServer

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")
# The typo of the issue: the group is widgets.example.com, asked for as .org.
WRONG_GROUP = GroupVersionResource("widgets.example.org", "v1", "widgets")
WRONG_VERSION = GroupVersionResource("apps", "v9", "deployments")
WRONG_RESOURCE = GroupVersionResource("", "v1", "configmapz")


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    driver = Adapter(request.param)
    yield driver
    driver.shutdown()


async def test_an_unserved_group_version_or_resource_is_not_a_missing_object(
    adapter: Adapter, kube_apiserver: ApiServer, kube_namespace: str
) -> None:
    ns = kube_namespace
    client = adapter.module.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path))
    try:
        # A wrong group: the server answers the text "404 page not found".
        with pytest.raises(ResourceNotServed) as group:
            await adapter.call(client.get, WRONG_GROUP, "a", namespace=ns)
        assert (group.value.group, group.value.version, group.value.resource) == (
            "widgets.example.org",
            "v1",
            "widgets",
        )
        assert "'widgets' in widgets.example.org/v1" in str(group.value)
        assert "404 page not found" in str(group.value)
        assert not str(group.value).endswith("\n")
        assert isinstance(group.value, NotFound)  # `except NotFound` still catches it
        # Every verb, the watch (its own connection) and a list say the same.
        widget = {
            "apiVersion": "widgets.example.org/v1",
            "kind": "Widget",
            "metadata": {"name": "a"},
        }
        with pytest.raises(ResourceNotServed, match="widgets.example.org/v1"):
            await adapter.call(client.create, WRONG_GROUP, widget, namespace=ns)
        with pytest.raises(ResourceNotServed, match="widgets.example.org/v1"):
            await adapter.collect(client.list(WRONG_GROUP, namespace=ns))
        with pytest.raises(ResourceNotServed, match="widgets.example.org/v1"):
            await adapter.call(client.delete, WRONG_GROUP, "a", namespace=ns)
        with pytest.raises(ResourceNotServed, match="widgets.example.org/v1"):
            await _watch(adapter, client, WRONG_GROUP, ns)
        # A wrong version of a served group, and a wrong resource of a served version: the
        # server's generic Status.
        with pytest.raises(ResourceNotServed) as version:
            await adapter.call(client.get, WRONG_VERSION, "a", namespace=ns)
        assert (version.value.group, version.value.version) == ("apps", "v9")
        assert "'deployments' in apps/v9" in str(version.value)
        with pytest.raises(ResourceNotServed, match=r"'configmapz' in v1 \(core group\)"):
            await adapter.call(client.get, WRONG_RESOURCE, "a", namespace=ns)
        # A missing object of a served resource, in a real and in a missing namespace.
        for namespace in (ns, f"{ns}-missing"):
            with pytest.raises(NotFound) as missing:
                await adapter.call(client.get, CM, "nope", namespace=namespace)
            assert type(missing.value) is NotFound
            assert str(missing.value) == '404 NotFound: configmaps "nope" not found'
        # A missing object's subresource of a served resource is an object's NotFound too.
        with pytest.raises(NotFound) as status:
            await adapter.call(
                client.get,
                GroupVersionResource("", "v1", "pods"),
                "nope",
                namespace=ns,
                subresource="status",
            )
        assert type(status.value) is NotFound
    finally:
        await adapter.close(client)


async def _watch(
    adapter: Adapter, client: object, resource: GroupVersionResource, namespace: str
) -> None:
    if adapter.name == "sync":

        def run() -> None:
            with client.watch(resource, namespace=namespace) as events:  # type: ignore[attr-defined]
                list(events)

        import trio

        await trio.to_thread.run_sync(run)
        return

    async def run_async() -> None:
        async with client.watch(resource, namespace=namespace) as events:  # type: ignore[attr-defined]
            async for _ in events:
                pass

    await adapter.call(run_async)
