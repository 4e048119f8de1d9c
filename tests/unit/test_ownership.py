"""Owner references: build, read, match, attach, and map children to controllers."""

from __future__ import annotations

from typing import Any

import pytest

from kubemoon_core import Change, ChangeType, ObjectKey, Scope
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import Controller, Source
from kubemoon_core.objects import (
    controller_of,
    enqueue_controller,
    is_owned_by,
    owner_reference,
    with_owner_reference,
)

WIDGET: dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "ns", "uid": "u-w"},
}
CM: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "w-config", "namespace": "ns"},
}


def test_owner_reference_names_the_owner() -> None:
    assert owner_reference(WIDGET) == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "name": "w",
        "uid": "u-w",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    loose = owner_reference(WIDGET, controller=False, block_owner_deletion=False)
    assert (loose["controller"], loose["blockOwnerDeletion"]) == (False, False)


@pytest.mark.parametrize(
    ("owner", "missing"),
    [
        ({**WIDGET, "apiVersion": None}, "apiVersion"),
        ({**WIDGET, "kind": ""}, "kind"),
        ({**WIDGET, "metadata": {"uid": "u"}}, "metadata.name"),
        ({**WIDGET, "metadata": {"name": "w"}}, "metadata.uid"),
        ({"apiVersion": "v1", "kind": "X", "metadata": "nope"}, "metadata.name"),
    ],
)
def test_owner_reference_refuses_incomplete_owners(owner: dict[str, Any], missing: str) -> None:
    with pytest.raises(LocalProtocolError, match=f"the owner has no {missing}"):
        owner_reference(owner)


def test_owner_reference_needs_a_mapping() -> None:
    with pytest.raises(LocalProtocolError, match="not a mapping"):
        owner_reference([])  # type: ignore[arg-type]


def test_with_owner_reference_attaches_and_reads_back() -> None:
    child = with_owner_reference(CM, WIDGET)
    assert CM["metadata"].get("ownerReferences") is None  # the input is untouched
    assert controller_of(child) == owner_reference(WIDGET)
    assert is_owned_by(child, WIDGET)
    assert is_owned_by(child, WIDGET, controller=True)
    # Attaching again replaces the reference instead of adding a second.
    again = with_owner_reference(child, WIDGET)
    assert len(again["metadata"]["ownerReferences"]) == 1
    # A version change of the owner's group is the same owner.
    v2 = {**WIDGET, "apiVersion": "example.com/v2"}
    assert is_owned_by(child, v2)


def test_ownership_matching_compares_group_kind_name_uid() -> None:
    child = with_owner_reference(CM, WIDGET, controller=False)
    assert controller_of(child) is None
    assert not is_owned_by(child, WIDGET, controller=True)
    other_uid = {**WIDGET, "metadata": {**WIDGET["metadata"], "uid": "u-other"}}
    other_group = {**WIDGET, "apiVersion": "other.io/v1"}
    other_kind = {**WIDGET, "kind": "Gadget"}
    other_name = {**WIDGET, "metadata": {**WIDGET["metadata"], "name": "x"}}
    for owner in (other_uid, other_group, other_kind, other_name):
        assert not is_owned_by(child, owner)
    # A reference without uid matches by group, kind and name.
    no_uid = {**CM, "metadata": {**CM["metadata"], "ownerReferences": [
        "garbage",
        {"apiVersion": "/bad", "kind": "Widget", "name": "w"},
        {"apiVersion": 1, "kind": "Widget", "name": "w"},
        {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w"},
    ]}}  # fmt: skip
    assert is_owned_by(no_uid, WIDGET)
    assert not is_owned_by({"metadata": {"ownerReferences": "x"}}, WIDGET)


def test_with_owner_reference_refuses_a_second_controller_and_cross_namespace() -> None:
    child = with_owner_reference(CM, WIDGET)
    rival = {**WIDGET, "metadata": {**WIDGET["metadata"], "name": "rival", "uid": "u-r"}}
    with pytest.raises(LocalProtocolError, match="already controlled by Widget 'w'"):
        with_owner_reference(child, rival)
    both = with_owner_reference(child, rival, controller=False)
    assert len(both["metadata"]["ownerReferences"]) == 2
    loose_first = with_owner_reference(with_owner_reference(CM, rival, controller=False), WIDGET)
    assert controller_of(loose_first) == owner_reference(WIDGET)
    elsewhere = {**CM, "metadata": {"name": "c", "namespace": "other"}}
    with pytest.raises(LocalProtocolError, match="only own objects of its namespace"):
        with_owner_reference(elsewhere, WIDGET)
    cluster_child = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
    with pytest.raises(LocalProtocolError, match="cluster scope"):
        with_owner_reference(cluster_child, WIDGET)
    cluster_owner = {
        "apiVersion": "example.com/v1",
        "kind": "Fleet",
        "metadata": {"name": "f", "uid": "u-f"},
    }
    assert controller_of(with_owner_reference(CM, cluster_owner))["kind"] == "Fleet"  # type: ignore[index]
    no_metadata = with_owner_reference({"apiVersion": "v1", "kind": "X"}, cluster_owner)
    assert no_metadata["metadata"]["ownerReferences"][0]["name"] == "f"


def test_enqueue_controller_maps_old_and_new_controllers() -> None:
    mapper = enqueue_controller("example.com", "Widget")
    old = with_owner_reference(CM, WIDGET)
    other = {**WIDGET, "metadata": {**WIDGET["metadata"], "name": "w2", "uid": "u-2"}}
    new = with_owner_reference(CM, other)
    key = ObjectKey("ns", "w-config")
    assert list(mapper(Change(ChangeType.MODIFIED, key, old, new))) == [
        ObjectKey("ns", "w"),
        ObjectKey("ns", "w2"),
    ]
    assert list(mapper(Change(ChangeType.MODIFIED, key, old, old))) == [ObjectKey("ns", "w")]
    assert list(mapper(Change(ChangeType.DELETED, key, old, None))) == [ObjectKey("ns", "w")]
    assert list(mapper(Change(ChangeType.ADDED, key, None, CM))) == []
    wrong_kind = with_owner_reference(CM, {**WIDGET, "kind": "Gadget"})
    wrong_group = with_owner_reference(CM, {**WIDGET, "apiVersion": "other.io/v1"})
    for child in (wrong_kind, wrong_group, with_owner_reference(CM, WIDGET, controller=False)):
        assert list(mapper(Change(ChangeType.ADDED, key, None, child))) == []
    nameless = {**CM, "metadata": {**CM["metadata"], "ownerReferences": [
        {"apiVersion": "example.com/v1", "kind": "Widget", "controller": True},
    ]}}  # fmt: skip
    assert list(mapper(Change(ChangeType.ADDED, key, None, nameless))) == []
    cluster = enqueue_controller("example.com", "Widget", owner_scope=Scope.CLUSTER)
    assert list(cluster(Change(ChangeType.ADDED, key, None, old))) == [ObjectKey("", "w")]


def test_enqueue_controller_drives_a_controller_source() -> None:
    c = Controller([Source.mapped("configmaps", enqueue_controller("example.com", "Widget"))])
    child = with_owner_reference(CM, WIDGET)
    assert c.receive("configmaps", Change(ChangeType.ADDED, ObjectKey.of(child), None, child)) == 1
    item = c.next_work(0.0)
    assert item is not None
    assert item.key == ObjectKey("ns", "w")
