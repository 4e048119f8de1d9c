"""The typed client's own refusals and decoding, through a real ``kubemoon_trio.Client``
against the simulated cluster (in-memory HTTP, trio's virtual clock; no sockets)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio.testing

from kubemoon_core.builtin import CONFIGMAPS, ConfigMap
from kubemoon_core.errors import LocalProtocolError, TypedDecodeError
from kubemoon_core.typed import MetadataField, custom_resource, resource_info
from kubemoon_testing.sim import SimulatedCluster, custom


@dataclass(slots=True)
class GadgetSpec:
    size: int


@custom_resource(group="example.com", version="v1")
@dataclass(slots=True)
class Gadget:
    spec: GadgetSpec
    metadata: MetadataField = MetadataField()


async def test_a_listed_item_that_does_not_decode_names_its_place(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = SimulatedCluster([custom("example.com", "v1", "gadgets", "Gadget")])
    async with cluster.client() as client:
        await client.create(Gadget(metadata={"name": "a"}, spec=GadgetSpec(1)), namespace="default")
        wrong = {"apiVersion": "example.com/v1", "kind": "Gadget", "spec": {"size": "big"}}
        await client.create(
            resource_info(Gadget).gvr, {**wrong, "metadata": {"name": "b"}}, namespace="default"
        )
        items = client.list(Gadget, namespace="default")
        first = await items.__anext__()
        assert isinstance(first, Gadget) and first.spec.size == 1
        with pytest.raises(TypedDecodeError) as caught:
            await items.__anext__()
        assert caught.value.path == "items[1].spec.size", caught.value.path
        assert items.page_shrinks == 0 and items.resource_version


async def test_what_a_kind_cannot_answer_is_refused_before_sending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = SimulatedCluster()
    async with cluster.client() as client:
        with pytest.raises(LocalProtocolError, match="metadata is no ConfigMap"):
            client.list(ConfigMap, namespace="default", metadata_only=True)  # type: ignore[call-overload]
        with pytest.raises(LocalProtocolError, match="needs the object"):
            await client.create(CONFIGMAPS)  # type: ignore[call-overload]
        with pytest.raises(LocalProtocolError, match="or an object of a kind alone; not type"):
            await client.create(ConfigMap)  # type: ignore[call-overload]
        with pytest.raises(LocalProtocolError, match="or an object of a kind alone"):
            await client.replace(ConfigMap(metadata={"name": "a"}), {"data": {}})  # type: ignore[call-overload]
        with pytest.raises(LocalProtocolError, match="subresource 'scale' answers another kind"):
            await client.patch(ConfigMap, "a", {}, namespace="d", subresource="scale")  # type: ignore[call-overload]
    assert cluster.requests == 0  # none was sent
