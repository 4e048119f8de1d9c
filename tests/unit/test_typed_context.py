"""A typed ReconcileContext without a server: ``obj`` decodes (once per cached version) and
the helpers refuse what is not a declared object or a mapping, before any request."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import Any

import pytest

from kubemoon_core import GroupVersionKind, GroupVersionResource, ObjectKey
from kubemoon_core.builtin import (
    CONFIGMAPS,
    NAMESPACES,
    RESOURCEQUOTAS,
    ConfigMap,
    ResourceQuota,
    meta_v1,
)
from kubemoon_core.errors import (
    LocalProtocolError,
    NamespaceRequired,
    SchemaError,
    TypedDecodeError,
)
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.lowlevel import WorkItem
from kubemoon_core.typed import Condition, decode
from kubemoon_trio import Client, ReconcileContext


class Primary:
    """The cache reader of the primary: one object, replaceable."""

    def __init__(self, obj: Mapping[str, Any] | None) -> None:
        self.obj = obj

    def get(self, key: ObjectKey) -> Mapping[str, Any] | None:
        return self.obj

    def json(self, key: ObjectKey) -> bytes | None:
        return None  # a plain cache keeps no bytes


class NoClient:
    async def request(self, request: Any) -> Any:
        raise AssertionError(f"no request expected: {request}")


def context(obj: Mapping[str, Any] | None, cls: type | None = ConfigMap) -> ReconcileContext[Any]:
    return ReconcileContext(
        controller="typed",
        item=WorkItem(ObjectKey("ns", "a"), 1, 0.0, 0),
        client=NoClient(),  # type: ignore[arg-type]
        primary=Primary(obj),  # type: ignore[arg-type]
        primary_resource=CONFIGMAPS,
        primary_kind=None,
        caches={},
        events=None,  # type: ignore[arg-type]
        cls=cls,
    )


CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}


def test_obj_is_decoded_once_per_cached_version() -> None:
    ctx = context(CM)
    first = ctx.obj
    assert isinstance(first, ConfigMap) and first.data == {"k": "v"}
    assert ctx.obj is first  # the same cached mapping: not decoded again
    assert ctx.raw is CM
    ctx.primary.obj = {**CM, "data": {"k": "w"}}  # type: ignore[attr-defined]
    second = ctx.obj
    assert second is not first and second is not None and second.data == {"k": "w"}
    ctx.primary.obj = None  # type: ignore[attr-defined]
    assert ctx.obj is None


def test_an_untyped_context_gives_the_mapping() -> None:
    assert context(CM, cls=None).obj is CM


def test_a_cached_object_that_does_not_decode_names_the_path() -> None:
    ctx = context({**CM, "data": {"k": 1}})
    with pytest.raises(TypedDecodeError) as caught:
        ctx.obj  # noqa: B018
    assert caught.value.path == ".data.k"


def test_owned_without_a_uid_is_empty() -> None:
    assert context(CM).owned(ConfigMap) == []


async def test_the_helpers_refuse_what_is_not_declared() -> None:
    ctx = context(CM)
    with pytest.raises(SchemaError, match="int is not a dataclass"):
        await ctx.ensure(3)  # type: ignore[call-overload]
    with pytest.raises(LocalProtocolError, match="needs the desired object"):
        await ctx.ensure(CONFIGMAPS)  # type: ignore[call-overload]
    with pytest.raises(LocalProtocolError, match="takes a declared object and no desired"):
        await ctx.ensure(ConfigMap(metadata={"name": "b"}), {"data": {}})  # type: ignore[call-overload]
    with pytest.raises(LocalProtocolError, match="needs the object"):
        await ctx.delete(CONFIGMAPS)  # type: ignore[call-overload]
    with pytest.raises(LocalProtocolError, match="a mapping or a declared object"):
        await ctx.update_status("ready")  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="LabelSelector is not declared"):
        await ctx.ensure(meta_v1.LabelSelector())
    with pytest.raises(SchemaError, match="LabelSelector is not declared"):
        await ctx.delete(meta_v1.LabelSelector())
    assert ctx.writes == 0


def test_a_resource_constant_still_reads_the_dynamic_way() -> None:
    ctx = context(CM)
    with pytest.raises(LocalProtocolError, match="is not watched by typed"):
        ctx.cache(GroupVersionResource("", "v1", "secrets"))


class CompactPrimary(Primary):
    """A compact cache's reader: it hands out the stored JSON document too."""

    def __init__(self, document: bytes | None) -> None:
        super().__init__(None)
        self.document = document
        self.gets = 0

    def get(self, key: ObjectKey) -> Mapping[str, Any] | None:
        self.gets += 1
        return None

    def json(self, key: ObjectKey) -> bytes | None:
        return self.document


def test_a_compact_caches_bytes_are_decoded_into_the_class_in_one_step() -> None:
    import json

    primary = CompactPrimary(json.dumps(CM).encode())
    ctx = context(None)
    ctx.primary = primary  # type: ignore[assignment]
    first = ctx.obj
    assert isinstance(first, ConfigMap) and first.data == {"k": "v"}
    assert primary.gets == 0  # never through a decoded mapping
    primary.document = bytes(primary.document or b"")  # equal bytes: not decoded again
    assert ctx.obj is first
    primary.document = json.dumps({**CM, "data": {"k": "w"}}).encode()
    second = ctx.obj
    assert isinstance(second, ConfigMap) and second.data == {"k": "w"}
    primary.document = json.dumps({**CM, "data": {"k": 1}}).encode()
    with pytest.raises(TypedDecodeError, match="data"):
        _ = ctx.obj


# -- typed conditions -----------------------------------------------------------------------

READY = {
    "type": "Ready",
    "status": "True",
    "reason": "Scaled",
    "message": "",
    "lastTransitionTime": "2026-01-02T03:04:05Z",
    "observedGeneration": 1,
}
WITH_STATUS = {**CM, "metadata": {"name": "a", "generation": 2, "resourceVersion": "7"}}


def test_condition_gives_typed_conditions() -> None:
    ctx = context({**WITH_STATUS, "status": {"conditions": [READY]}}, cls=None)
    (kept,) = ctx.condition("Ready", True, "Scaled")
    assert isinstance(kept, Condition)
    assert (kept.type, kept.status, kept.reason, kept.observed_generation) == (
        "Ready",
        "True",
        "Scaled",
        2,
    )
    # Not flipped: the transition time stays the stored one.
    assert kept.last_transition_time == datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    (flipped,) = ctx.condition("Ready", False, "Scaling", "1 of 2")
    assert flipped.status == "False" and flipped.message == "1 of 2"
    assert flipped.last_transition_time > kept.last_transition_time
    # The mappings, as the dynamic path writes them.
    assert ctx.condition_dicts("Ready", True, "Scaled") == [{**READY, "observedGeneration": 2}]


def test_a_stored_condition_that_is_no_metav1_condition_names_its_place() -> None:
    broken = {key: value for key, value in READY.items() if key != "reason"}
    stored = {"conditions": [{**READY, "type": "Synced"}, broken]}
    ctx = context({**WITH_STATUS, "status": stored}, cls=None)
    with pytest.raises(TypedDecodeError) as caught:
        ctx.condition("Synced", True, "Done")
    assert caught.value.path.startswith(".status.conditions[1]"), caught.value.path
    assert "reason" in str(caught.value)


class Recording(NoClient):
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def request(self, request: Any) -> Any:
        self.sent.append(request)
        return {}


async def test_update_status_of_a_mapping_encodes_the_typed_conditions_in_it() -> None:
    ctx = context({**WITH_STATUS, "status": {"conditions": [READY]}}, cls=None)
    client = Recording()
    ctx.client = client  # type: ignore[assignment]
    # Typed conditions equal to the stored ones write nothing.
    assert not await ctx.update_status({"conditions": [decode(Condition, READY)]})
    assert await ctx.update_status({"conditions": ctx.condition("Ready", False, "Scaling")})
    (sent,) = client.sent
    body = json.loads(sent.body)
    (written,) = body["status"]["conditions"]
    assert written["status"] == "False" and written["reason"] == "Scaling"
    assert written["lastTransitionTime"].endswith("Z")


def test_decoding_an_object_already_typed_warns_and_gives_it_back() -> None:
    typed = decode(Condition, READY)
    with pytest.warns(DeprecationWarning, match="given a Condition already"):
        assert decode(Condition, typed) is typed
    with pytest.raises(TypedDecodeError):  # another class's object is still refused
        decode(ConfigMap, typed)


def test_a_cache_is_named_by_its_kind_too() -> None:
    ctx = context(CM)
    with pytest.raises(LocalProtocolError, match=r"configmaps.v1 is not watched by typed"):
        ctx.cache(ConfigMap)


# -- scope mistakes -------------------------------------------------------------------------


def cluster_scoped_context() -> ReconcileContext[Any]:
    """The context of a cluster-scoped primary (a Namespace ``team``): no namespace in its key."""
    return ReconcileContext(
        controller="teams",
        item=WorkItem(ObjectKey("", "team"), 1, 0.0, 0),
        client=NoClient(),  # type: ignore[arg-type]
        primary=Primary({"metadata": {"name": "team", "uid": "u-1"}}),  # type: ignore[arg-type]
        primary_resource=NAMESPACES,
        primary_kind=GroupVersionKind("", "v1", "Namespace"),
        caches={},
        events=None,  # type: ignore[arg-type]
        cls=None,
    )


async def test_ensure_of_a_namespaced_kind_without_a_namespace_is_refused_before_sending() -> None:
    ctx = cluster_scoped_context()
    quota = ResourceQuota(metadata={"name": "team"})
    with pytest.raises(NamespaceRequired) as caught:
        await ctx.ensure(quota)
    message = str(caught.value)
    assert "ResourceQuota 'team' (resourcequotas.v1) is namespaced" in message, message
    assert "the primary Namespace 'team' is cluster-scoped" in message, message
    assert "give metadata.namespace" in message, message
    assert (caught.value.kind, caught.value.name) == ("ResourceQuota", "team")
    assert caught.value.resource == RESOURCEQUOTAS
    # Not owned either: the scope is the kind's, whoever owns it.
    with pytest.raises(NamespaceRequired):
        await ctx.ensure(quota, owned=False)
    assert ctx.writes == 0  # and NoClient saw no request


async def test_delete_of_a_namespaced_kind_without_a_namespace_is_refused_before_sending() -> None:
    ctx = cluster_scoped_context()
    # A real client on a port nothing listens on: the refusal comes before any connection.
    async with Client(ClientConfig(server="https://127.0.0.1:9")) as client:
        ctx.client = client
        with pytest.raises(NamespaceRequired, match=r"ResourceQuota 'team' \(resourcequotas.v1\)"):
            await ctx.delete(ResourceQuota(metadata={"name": "team"}))
        assert client.connection_count == 0
    assert ctx.writes == 0
