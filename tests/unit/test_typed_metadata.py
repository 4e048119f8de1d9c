"""Typed ``metadata``: every kind's ``obj.metadata`` is an ``ObjectMeta``, set from one or
from a dict literal, round-tripped with its unknown fields by both decoders; the mapping
view of earlier releases still reads, with a DeprecationWarning."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest

from kubemoon_core import _typed_json as typed_json
from kubemoon_core.builtin import ConfigMap, Deployment, Namespace
from kubemoon_core.builtin.core_v1 import ConfigMapList
from kubemoon_core.builtin.meta_v1 import ListMeta, ObjectMeta, OwnerReference
from kubemoon_core.errors import LocalProtocolError, TypedDecodeError
from kubemoon_core.json_backends import decode_json, use_msgspec
from kubemoon_core.typed import MetadataField, PreserveUnknown, custom_resource, decode, encode

# Everything ObjectMeta knows, plus a field it does not (a newer apiserver's), nested too.
METADATA: dict[str, Any] = {
    "name": "d",
    "namespace": "ns",
    "uid": "0b5c",
    "resourceVersion": "42",
    "generation": 3,
    "creationTimestamp": "2026-12-07T10:00:00Z",
    "labels": {"app": "web"},
    "annotations": {"a/b": "c"},
    "finalizers": ["x/y"],
    "ownerReferences": [
        {"apiVersion": "v1", "kind": "Widget", "name": "w", "uid": "u1", "controller": True}
    ],
    "managedFields": [
        {
            "manager": "kubectl",
            "operation": "Apply",
            "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
            "time": "2026-12-07T10:00:00Z",
        }
    ],
    "futureField": {"nested": [1, 2]},
}
DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": METADATA,
    "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}, "templateFuture": True},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
    },
}


VIEW = "metadata as a mapping"


@pytest.fixture(params=["msgspec", "python"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    assert use_msgspec(request.param == "msgspec") is (request.param == "msgspec")
    try:
        yield request.param
    finally:
        use_msgspec(True)


@custom_resource(group="example.com", version="v1")
@dataclass
class Plain:
    size: int = 0
    metadata: MetadataField = MetadataField()


@custom_resource(group="example.com", version="v1")
@dataclass(slots=True, kw_only=True)
class Slotted:
    size: int = 0
    metadata: MetadataField = MetadataField()


def test_decoded_metadata_is_an_object_meta_with_snake_case_attributes(backend: str) -> None:
    typed = decode_json(Deployment, json.dumps(DEPLOYMENT))
    meta = typed.metadata
    assert type(meta) is ObjectMeta
    assert (meta.name, meta.namespace, meta.generation) == ("d", "ns", 3)
    assert meta.resource_version == "42" and meta.labels == {"app": "web"}
    assert meta.owner_references == [
        OwnerReference(api_version="v1", kind="Widget", name="w", uid="u1", controller=True)
    ]
    assert meta.managed_fields is not None and meta.managed_fields[0].fields_type == "FieldsV1"
    assert meta.unknown_fields == {"futureField": {"nested": [1, 2]}}
    template = typed.spec.template.metadata if typed.spec is not None else None
    assert template is not None and template.unknown_fields == {"templateFuture": True}
    if backend == "msgspec":  # ObjectMeta's unknown fields keep the kind on msgspec's path
        assert Deployment in typed_json._FAST


def test_metadata_round_trips_with_its_unknown_fields_on_both_decoders(backend: str) -> None:
    typed = decode_json(Deployment, json.dumps(DEPLOYMENT).encode())
    assert typed == decode(Deployment, DEPLOYMENT)
    assert encode(typed) == DEPLOYMENT
    # An update keeps what this version does not know: change a label, lose nothing else.
    typed.metadata.labels = {"app": "web", "tier": "front"}
    sent = encode(typed)
    assert sent["metadata"] == {**METADATA, "labels": {"app": "web", "tier": "front"}}
    assert sent["spec"]["template"]["metadata"]["templateFuture"] is True


def test_a_wrong_metadata_value_names_its_path_on_both_decoders(backend: str) -> None:
    for metadata, path, words in [
        ({"name": 3}, ".metadata.name", "expected str, got int"),
        ([], ".metadata", "expected object, got list"),
        ({"ownerReferences": [{"kind": "X"}]}, ".metadata.ownerReferences[0].apiVersion", ""),
    ]:
        data = json.dumps({"metadata": metadata})
        with pytest.raises(TypedDecodeError) as caught:
            decode_json(ConfigMap, data)
        assert caught.value.path == path and words in str(caught.value)


def test_empty_or_null_metadata_is_an_empty_object_meta_and_encodes_to_none(backend: str) -> None:
    for data in (b"{}", b'{"metadata": null}', b'{"metadata": {}}'):
        cm = decode_json(ConfigMap, data)
        assert cm.metadata == ObjectMeta()
        assert encode(cm) == {"apiVersion": "v1", "kind": "ConfigMap"}


@pytest.mark.parametrize("cls", [ConfigMap, Plain, Slotted])
def test_a_dict_literal_sets_metadata_in_the_constructor_and_later(cls: Any) -> None:
    obj = cls(metadata={"name": "x", "namespace": "y", "ownerReferences": [], "newKey": 1})
    assert obj.metadata == ObjectMeta(
        name="x", namespace="y", owner_references=[], unknown_fields={"newKey": 1}
    )
    assert encode(obj)["metadata"] == {
        "name": "x",
        "namespace": "y",
        "ownerReferences": [],
        "newKey": 1,
    }
    obj.metadata = {"generateName": "g-"}
    assert obj.metadata == ObjectMeta(generate_name="g-")
    meta = ObjectMeta(name="z")
    obj.metadata = meta
    assert obj.metadata is meta
    assert dataclasses.replace(obj, metadata={"name": "r"}).metadata.name == "r"
    # Left out: an empty ObjectMeta of the object's own, not one shared by every object.
    first, second = cls(), cls()
    assert first.metadata == ObjectMeta() and first.metadata is not second.metadata


def test_metadata_is_refused_unless_an_object_meta_or_a_mapping_of_its_json_form() -> None:
    with pytest.raises(LocalProtocolError, match="metadata must be an ObjectMeta or a mapping"):
        Namespace(metadata="team-a")  # type: ignore[arg-type]
    with pytest.raises(TypedDecodeError, match="expected str, got int") as caught:
        Namespace(metadata={"name": 1})
    assert caught.value.path == ".name"
    # A Python name where the JSON name belongs would be sent as an unknown field: refused.
    with pytest.raises(LocalProtocolError, match="'owner_references': use 'ownerReferences'"):
        ConfigMap(metadata={"name": "a", "owner_references": []})
    # From the server, an unknown field is kept (decoding is not construction).
    kept = decode(ConfigMap, {"metadata": {"owner_references": []}}).metadata
    assert kept.unknown_fields == {"owner_references": []}


def test_the_mapping_view_of_earlier_releases_reads_the_json_form_with_a_warning() -> None:
    cm = decode(ConfigMap, {"metadata": METADATA})
    with pytest.warns(DeprecationWarning, match=r"\['name'\]: use \.name") as caught:
        assert cm.metadata["name"] == "d"
    assert caught[0].filename == __file__  # the warning names the caller's line
    with pytest.warns(
        DeprecationWarning, match=r"\.get\('resourceVersion'\): use \.resource_version"
    ):
        assert cm.metadata.get("resourceVersion") == "42"
    with pytest.warns(DeprecationWarning, match=VIEW):
        assert cm.metadata.get("deletionTimestamp", "absent") == "absent"
    with pytest.warns(DeprecationWarning, match=VIEW):  # JSON values, as the dict held
        assert cm.metadata["ownerReferences"] == METADATA["ownerReferences"]
    with pytest.warns(DeprecationWarning, match=VIEW):
        assert "labels" in cm.metadata and "selfLink" not in cm.metadata
    with pytest.warns(DeprecationWarning, match=VIEW):
        assert {**cm.metadata} == METADATA
    with pytest.warns(DeprecationWarning, match=VIEW):
        assert dict(cm.metadata.items()) == METADATA
    with pytest.warns(DeprecationWarning, match=VIEW):
        keys, iterated, values = cm.metadata.keys(), list(cm.metadata), cm.metadata.values()
    assert keys == iterated and sorted(keys) == sorted(METADATA)
    assert values == [METADATA[k] for k in keys]
    with pytest.warns(DeprecationWarning, match=VIEW), pytest.raises(KeyError):
        cm.metadata["selfLink"]
    with pytest.raises(TypeError):  # read-only
        cm.metadata["name"] = "other"  # type: ignore[index]
    assert ObjectMeta()  # no __len__: an empty ObjectMeta is still true


def test_lists_have_typed_list_metadata() -> None:
    data = {
        "metadata": {"resourceVersion": "9", "continue": "t"},
        "items": [{"metadata": {"name": "a"}}],
    }
    typed = decode(ConfigMapList, data)
    assert typed.metadata == ListMeta(resource_version="9", continue_="t")
    assert typed.items[0].metadata.name == "a"
    item = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    assert encode(typed) == {**data, "items": [item]}


def test_msgspec_decodes_known_metadata_itself_and_unknown_fields_the_python_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    known = {k: v for k, v in METADATA.items() if k != "futureField"}
    spec = json.loads(json.dumps(DEPLOYMENT["spec"]))
    del spec["template"]["metadata"]["templateFuture"]
    doc = json.dumps({**DEPLOYMENT, "metadata": known, "spec": spec})

    def python_way(cls: type, data: object) -> object:
        raise AssertionError("msgspec's path was left")

    monkeypatch.setattr(typed_json, "decode", python_way)
    typed = decode_json(Deployment, doc)  # msgspec is on by default
    assert typed.metadata.owner_references is not None and typed.metadata.unknown_fields == {}
    with pytest.raises(AssertionError, match="msgspec's path was left"):
        decode_json(Deployment, json.dumps(DEPLOYMENT))  # futureField: judged again
    monkeypatch.undo()
    assert decode_json(Deployment, json.dumps(DEPLOYMENT)).metadata.unknown_fields == {
        "futureField": {"nested": [1, 2]}
    }


@dataclass
class Holder:
    inner: list[Open]


@dataclass
class Open:
    name: str
    rest: Annotated[dict[str, Any], PreserveUnknown()] = field(default_factory=dict)


def test_a_nested_class_keeping_unknown_fields_keeps_them_on_msgspecs_path(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unlike ObjectMeta's (rare), these unknown fields are the point: never a second pass.
    data = b'{"inner": [{"name": "a", "x": 1}, {"name": "b"}]}'
    expected = Holder([Open("a", {"x": 1}), Open("b")])
    assert decode_json(Holder, data) == expected
    if backend == "msgspec":
        assert Holder in typed_json._FAST
        monkeypatch.setattr(typed_json, "decode", None)  # the Python way would fail now
        assert decode_json(Holder, data) == expected
        monkeypatch.undo()
    with pytest.raises(TypedDecodeError) as caught:
        decode_json(Holder, b'{"inner": [{"name": 1}]}')
    assert caught.value.path == ".inner[0].name"


def test_metadata_of_an_object_made_without_init_is_an_attribute_error() -> None:
    assert not hasattr(Plain.__new__(Plain), "metadata")
    assert not hasattr(Slotted.__new__(Slotted), "metadata")


# -- attack 37: what a tenant or a newer apiserver puts in metadata ----------------------


def test_owner_references_and_managed_fields_keep_the_fields_a_newer_apiserver_adds(
    backend: str,
) -> None:
    # ManagedFieldsEntry gained "subresource" in 1.22: a field added there again would make
    # every object undecodable (controllers stopped, typed webhooks denying every write).
    owner = {**METADATA["ownerReferences"][0], "futureRef": {"x": 1}}
    entry = {**METADATA["managedFields"][0], "futureEntry": "y"}
    metadata = {**METADATA, "ownerReferences": [owner], "managedFields": [entry]}
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"a": "b"}}
    typed = decode_json(ConfigMap, json.dumps(doc))
    assert typed == decode(ConfigMap, doc)
    meta = typed.metadata
    assert meta.owner_references is not None and meta.managed_fields is not None
    assert meta.owner_references[0].unknown_fields == {"futureRef": {"x": 1}}
    assert meta.owner_references[0].uid == "u1"
    assert meta.managed_fields[0].unknown_fields == {"futureEntry": "y"}
    assert encode(typed) == doc  # an update loses none of them
    if backend == "msgspec":  # rare, as ObjectMeta's: the kind stays on msgspec's path
        assert ConfigMap in typed_json._FAST
    with pytest.raises(TypedDecodeError) as caught:  # the known fields stay strict
        decode_json(ConfigMap, json.dumps({"metadata": {"ownerReferences": [{"uid": 1}]}}))
    assert caught.value.path.startswith(".metadata.ownerReferences[0].")


@pytest.mark.filterwarnings("ignore:reading a typed object's metadata as a mapping")
def test_reading_one_key_of_the_mapping_view_encodes_that_field_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The apiserver keeps 10,000 ownerReferences on one object (1.6 MB): encoding all of
    # them for each metadata["name"] made every read of that object cost milliseconds.
    owners = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": f"n{i}", "uid": f"u{i}"}
        for i in range(10_000)
    ]
    metadata = {"name": "a", "ownerReferences": owners, "unknown": {"k": [1]}}
    cm = decode(ConfigMap, {"metadata": metadata})
    shadowed = ObjectMeta(unknown_fields={"name": "from-unknown", "x": 1})

    def whole(obj: object) -> dict[str, Any]:
        raise AssertionError("the whole metadata was encoded for one key")

    monkeypatch.setattr("kubemoon_core._metadata_view.encode", whole)
    assert cm.metadata["name"] == "a"
    assert cm.metadata.get("uid", "none") == "none"
    assert "ownerReferences" in cm.metadata and "labels" not in cm.metadata
    assert cm.metadata["unknown"] == {"k": [1]}
    assert cm.metadata["ownerReferences"][9_999] == owners[9_999]
    with pytest.raises(KeyError):
        cm.metadata["selfLink"]
    # As the encoded dict: an unknown field of a known name shows while that is unset.
    assert shadowed["name"] == "from-unknown" and shadowed.get("x") == 1
    monkeypatch.undo()
    assert {**cm.metadata} == encode(cm.metadata)


def test_a_metadata_mapping_must_be_json_data_or_is_refused_naming_the_place() -> None:
    for mapping, words in [
        ({1: "x", "name": "a"}, "metadata: key 1 is no str"),
        ({"labels": {2: "v"}}, "metadata['labels']: key 2 is no str"),
        ({"future": {"deep": [{None: 1}]}}, "metadata['future']['deep'][0]: key None is no str"),
        ({"future": {1, 2}}, "metadata['future']: set is no JSON value"),
        ({"annotations": {"a": object()}}, "metadata['annotations']['a']: object is no JSON"),
    ]:
        with pytest.raises(LocalProtocolError) as caught:
            ConfigMap(metadata=mapping)
        assert words in str(caught.value)
    # Not the advice to write "unknownFields" (which would be sent as a field of that name).
    with pytest.raises(LocalProtocolError, match="'unknown_fields' is no JSON name"):
        ConfigMap(metadata={"name": "a", "unknown_fields": {"x": 1}})
    assert encode(ConfigMap(metadata={"name": "a", "x": [1, {"y": None}]}))["metadata"] == {
        "name": "a",
        "x": [1, {"y": None}],
    }


@dataclass
class TwoTemplates:
    """Not slotted: each MetadataField keeps its value under its own name."""

    own: MetadataField = MetadataField()
    template: MetadataField = MetadataField()


@dataclass(slots=True, kw_only=True)
class SlottedTemplate:
    """A slotted nested class: its MetadataField is bound when the kind is declared."""

    template_metadata: MetadataField = MetadataField()
    image: str = "i"


@custom_resource(group="example.com", version="v1")
@dataclass(slots=True, kw_only=True)
class Templated:
    template: SlottedTemplate = field(default_factory=SlottedTemplate)
    metadata: MetadataField = MetadataField()


def test_metadata_fields_of_other_names_keep_their_own_values(backend: str) -> None:
    # Both were kept under "metadata": the last one set won, the other was lost on update.
    two = TwoTemplates(own={"name": "a"}, template={"name": "b"})
    assert (two.own.name, two.template.name) == ("a", "b")
    data = {"own": {"name": "x", "k": 1}, "template": {"name": "y"}}
    decoded = decode_json(TwoTemplates, json.dumps(data))
    assert (decoded.own.name, decoded.template.name) == ("x", "y")
    assert encode(decoded) == data


def test_a_nested_slotted_metadata_field_converts_a_mapping_before_any_decoding() -> None:
    # Bound at custom_resource: a nested slotted class's slot held the dict (or the
    # MetadataField default itself, which encode then failed on with an AttributeError).
    made = SlottedTemplate(template_metadata={"labels": {"a": "b"}})
    assert made.template_metadata == ObjectMeta(labels={"a": "b"})
    assert SlottedTemplate().template_metadata == ObjectMeta()
    assert encode(Templated(template=made))["template"] == {
        "templateMetadata": {"labels": {"a": "b"}},
        "image": "i",
    }
    with pytest.raises(LocalProtocolError, match="key 1 is no str"):
        SlottedTemplate(template_metadata={1: "x"})
