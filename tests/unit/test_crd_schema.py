"""The schema generator: one row per supported type and marker, one per refusal."""

import datetime
import enum
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import pytest

from kubemoon_core import Scope
from kubemoon_core.errors import LocalProtocolError, SchemaError
from kubemoon_core.typed import (
    Condition,
    Description,
    Format,
    JsonName,
    Length,
    ListType,
    Maximum,
    MetadataField,
    Minimum,
    Pattern,
    PreserveUnknown,
    PrinterColumn,
    Rule,
    Scale,
    crd_manifest,
    custom_resource,
    openapi_schema,
    resource_info,
)
from kubemoon_core.webhooks import ConversionWebhook, ServiceReference


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Inner:
    """An inner object.

    Only the first paragraph is the description.
    """

    name: str


@dataclass
class NoDoc:
    x: int


def schema_of(tp: Any) -> dict[str, Any]:
    """The schema of a required field ``f`` of type ``tp``."""

    @dataclass
    class Holder:
        f: tp  # type: ignore[valid-type]

    schema = openapi_schema(Holder)
    assert schema["required"] == ["f"]
    prop: dict[str, Any] = schema["properties"]["f"]
    return prop


TYPES: list[tuple[Any, dict[str, Any]]] = [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (Any, {"x-kubernetes-preserve-unknown-fields": True}),
    (int | str, {"x-kubernetes-int-or-string": True}),
    (str | int, {"x-kubernetes-int-or-string": True}),
    (datetime.datetime, {"type": "string", "format": "date-time"}),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, 2], {"type": "integer", "enum": [1, 2]}),
    (Colour, {"type": "string", "enum": ["red", "blue"]}),
    (Level, {"type": "integer", "enum": [1, 2]}),
    (list[str], {"type": "array", "items": {"type": "string"}}),
    (list[list[int]], {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}),
    (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    (dict[str, Any], {"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
    (
        Inner,
        {
            "description": "An inner object.",
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    ),
    (NoDoc, {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}),
    (list[Inner], {"type": "array", "items": openapi_schema(Inner)}),
]


@pytest.mark.parametrize(("tp", "expected"), TYPES, ids=[repr(t) for t, _ in TYPES])
def test_each_supported_type(tp: Any, expected: dict[str, Any]) -> None:
    assert schema_of(tp) == expected


MARKERS: list[tuple[Any, dict[str, Any]]] = [
    (Annotated[int, Minimum(0)], {"type": "integer", "minimum": 0}),
    (Annotated[float, Maximum(1.5)], {"type": "number", "maximum": 1.5}),
    (
        Annotated[int, Minimum(0, exclusive=True), Maximum(9, exclusive=True)],
        {
            "type": "integer",
            "minimum": 0,
            "exclusiveMinimum": True,
            "maximum": 9,
            "exclusiveMaximum": True,
        },
    ),
    (Annotated[str, Length(1, 5)], {"type": "string", "minLength": 1, "maxLength": 5}),
    (Annotated[str, Length(max=5)], {"type": "string", "maxLength": 5}),
    (
        Annotated[list[str], Length(min=1)],
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
    ),
    (
        Annotated[dict[str, str], Length(0, 3)],
        {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "minProperties": 0,
            "maxProperties": 3,
        },
    ),
    (Annotated[str, Pattern("^a+$")], {"type": "string", "pattern": "^a+$"}),
    (Annotated[str, Format("hostname")], {"type": "string", "format": "hostname"}),
    (Annotated[int, Format("int64")], {"type": "integer", "format": "int64"}),
    (Annotated[str, Description("Words.")], {"description": "Words.", "type": "string"}),
    (
        Annotated[Inner, Description("Overrides the docstring.")],
        {
            "description": "Overrides the docstring.",
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    ),
    (
        list[Annotated[str, Description("An item."), Length(1)]],
        {"type": "array", "items": {"description": "An item.", "type": "string", "minLength": 1}},
    ),
    (
        Annotated[list[str], ListType("set")],
        {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
    ),
    (
        Annotated[list[Inner], ListType("atomic")],
        {"type": "array", "items": openapi_schema(Inner), "x-kubernetes-list-type": "atomic"},
    ),
    (
        Annotated[list[Inner], ListType("map", ("name",))],
        {
            "type": "array",
            "items": openapi_schema(Inner),
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
        },
    ),
    (
        Annotated[int, Rule("self > 1")],
        {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 1"}]},
    ),
    (
        Annotated[
            Inner,
            Rule(
                "self.name != ''",
                message="m",
                message_expression="'e'",
                reason="FieldValueInvalid",
                field_path=".name",
            ),
            Rule("true"),
        ],
        {
            **openapi_schema(Inner),
            "x-kubernetes-validations": [
                {
                    "rule": "self.name != ''",
                    "message": "m",
                    "messageExpression": "'e'",
                    "reason": "FieldValueInvalid",
                    "fieldPath": ".name",
                },
                {"rule": "true"},
            ],
        },
    ),
    (Annotated[str, "a foreign marker", 42], {"type": "string"}),
]


@pytest.mark.parametrize(("tp", "expected"), MARKERS, ids=[repr(t) for t, _ in MARKERS])
def test_each_marker(tp: Any, expected: dict[str, Any]) -> None:
    assert schema_of(tp) == expected


def test_field_names_optional_fields_and_defaults() -> None:
    @dataclass
    class Fields:
        """Fields."""

        target_namespaces: list[str]
        from_: str
        renamed: Annotated[str, JsonName("URL")]
        described: str = field(default="x", metadata={"description": "From metadata."})
        maybe: int | None = None
        maybe_annotated: Annotated[int, Minimum(1)] | None = None
        tier: Colour = Colour.RED
        items: list[int] = field(default_factory=lambda: [1, 2])
        when: datetime.datetime = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
        inner: Inner = field(default_factory=lambda: Inner("n"))

    schema = openapi_schema(Fields)
    assert schema["description"] == "Fields."
    assert schema["required"] == ["targetNamespaces", "from", "URL"]
    props = schema["properties"]
    assert list(props) == [
        "targetNamespaces",
        "from",
        "URL",
        "described",
        "maybe",
        "maybeAnnotated",
        "tier",
        "items",
        "when",
        "inner",
    ]
    assert props["described"] == {"description": "From metadata.", "type": "string", "default": "x"}
    assert props["maybe"] == {"type": "integer"}  # None is absence, not a default
    assert props["maybeAnnotated"] == {"type": "integer", "minimum": 1}
    assert props["tier"]["default"] == "red"
    assert props["items"]["default"] == [1, 2]
    assert props["when"]["default"] == "2026-01-02T00:00:00Z"
    assert props["inner"]["default"] == {"name": "n"}


def test_preserve_unknown_marks_the_object() -> None:
    @dataclass
    class Open:
        known: str
        rest: Annotated[dict[str, Any], PreserveUnknown()] = field(default_factory=dict)

    assert openapi_schema(Open) == {
        "type": "object",
        "properties": {"known": {"type": "string"}},
        "required": ["known"],
        "x-kubernetes-preserve-unknown-fields": True,
    }


def test_an_empty_dataclass_is_an_object_without_properties() -> None:
    @dataclass
    class Empty:
        """Nothing."""

    assert openapi_schema(Empty) == {"description": "Nothing.", "type": "object"}


# -- refusals -------------------------------------------------------------------------------


@dataclass
class Loop:
    child: list["Loop"]


@dataclass
class Broken:
    x: int = "not an int"  # type: ignore[assignment]


@dataclass
class Unresolvable:
    x: "NotDefinedAnywhere"  # type: ignore[name-defined]  # noqa: F821


REFUSED: list[tuple[Any, str]] = [
    (set[str], "unsupported type set"),
    (tuple[int, int], "unsupported type tuple"),
    (bytes, "unsupported type bytes"),
    (list, "unsupported type list"),
    (dict[int, str], "dict keys must be str, not int"),
    (int | float, "unions other than int | str"),
    (list[str | None], "None is only allowed for a whole field"),
    (Literal["a", 1], "enum values must be all str or all int"),
    (Literal[True], "enum values must be all str or all int"),
    (Annotated[str, Minimum(1)], "Minimum does not apply to string"),
    (Annotated[int, Maximum(1), Length(1)], "Length does not apply to integer"),
    (Annotated[int, Pattern("a")], "Pattern does not apply to integer"),
    (Annotated[bool, Format("x")], "Format does not apply to boolean"),
    (Annotated[str, ListType("set")], "ListType does not apply to string"),
    (Annotated[str, Length(-1)], "a length bound is negative"),
    (Annotated[str, Pattern("(")], "invalid pattern"),
    (Annotated[str, Rule("  ")], "an empty CEL rule"),
    (Annotated[list[str], ListType("bag")], "list type must be one of"),  # type: ignore[arg-type]
    (Annotated[list[str], ListType("set", ("k",))], "keys are only for a list type 'map'"),
    (Annotated[list[Inner], ListType("set")], "a list type 'set' needs scalar items"),
    (Annotated[list[str], ListType("map", ("k",))], "needs dataclass items and keys"),
    (Annotated[list[Inner], ListType("map")], "needs dataclass items and keys"),
    (Annotated[list[Inner], ListType("map", ("other",))], "map key 'other' is not a field"),
    (
        Annotated[list[Condition], ListType("map", ("observedGeneration",))],
        "must be a scalar that is required",
    ),
    (list[Annotated[str, JsonName("x")]], "JsonName applies to a field"),
    (Loop, "Loop contains itself"),
    (Broken, "Broken.x: the default 'not an int' does not match the type"),
    (Unresolvable, "Unresolvable: cannot resolve the type hints"),
]


@pytest.mark.parametrize(("tp", "words"), REFUSED, ids=[repr(t) for t, _ in REFUSED])
def test_each_refusal_names_the_field(tp: Any, words: str) -> None:
    with pytest.raises(SchemaError, match="Holder.f|Loop|Broken|Unresolvable") as caught:
        schema_of(tp)
    assert words in str(caught.value)


DEFAULTS: list[tuple[Any, Any, str]] = [
    (Annotated[int, Minimum(1)], 0, "breaks Minimum"),
    (Annotated[int, Minimum(1, exclusive=True)], 1, "breaks Minimum"),
    (Annotated[int, Maximum(1)], 2, "breaks Maximum"),
    (Annotated[float, Maximum(1, exclusive=True)], 1.0, "breaks Maximum"),
    (Annotated[str, Length(2)], "a", "breaks Length"),
    (Annotated[str, Length(max=1)], "ab", "breaks Length"),
    (Annotated[str, Pattern("^b")], "a", "breaks Pattern"),
    (Colour, "red", "does not match the type"),
    (datetime.datetime, datetime.datetime(2026, 1, 1), "does not match the type"),
    (Inner, 3, "does not match the type"),
]


@pytest.mark.parametrize(("tp", "default", "words"), DEFAULTS)
def test_a_default_must_fit_the_type_and_bounds(tp: Any, default: Any, words: str) -> None:
    @dataclass
    class Holder:
        f: tp = default  # type: ignore[valid-type]

    with pytest.raises(SchemaError, match="Holder.f") as caught:
        openapi_schema(Holder)
    assert words in str(caught.value)


def test_defaults_within_bounds_are_accepted() -> None:
    @dataclass
    class Holder:
        a: Annotated[int, Minimum(1), Maximum(1)] = 1
        b: Annotated[str, Length(1, 1), Pattern("^a$"), Description("d")] = "a"
        c: Annotated[list[str], Length(max=1)] = field(default_factory=list)

    props = openapi_schema(Holder)["properties"]
    assert [props[k]["default"] for k in "abc"] == [1, "a", []]


def test_field_level_refusals() -> None:
    @dataclass
    class NoInit:
        x: int = field(init=False, default=1)

    @dataclass
    class TwoExtras:
        a: Annotated[dict[str, Any], PreserveUnknown()]
        b: Annotated[dict[str, Any], PreserveUnknown()]

    @dataclass
    class WrongExtra:
        a: Annotated[dict[str, str], PreserveUnknown()]

    @dataclass
    class Clash:
        a_b: str
        aB: str

    @dataclass
    class EmptyName:
        a: Annotated[str, JsonName("")]

    cases = [
        (NoInit, "NoInit.x: fields with init=False"),
        (TwoExtras, "TwoExtras.b: a second PreserveUnknown field"),
        (WrongExtra, "WrongExtra.a: a PreserveUnknown field must be dict[str, Any]"),
        (Clash, "Clash.aB: JSON name 'aB' is also a_b's"),
        (EmptyName, "EmptyName.a: empty JSON name"),
        (int, "int is not a dataclass"),
    ]
    for cls, words in cases:
        with pytest.raises(SchemaError) as caught:
            openapi_schema(cls)
        assert words in str(caught.value)


# -- resources and manifests ----------------------------------------------------------------


@dataclass
class ThingSpec:
    size: Annotated[int, Minimum(0)] = 1
    selector: str = ""


@dataclass
class ThingStatus:
    replicas: int = 0
    selector: str = ""
    inner: Inner | None = None


@custom_resource(
    group="example.com",
    version="v1",
    short_names=("th",),
    categories=("all",),
    printer_columns=(
        PrinterColumn(
            "Size", ".spec.size", type="integer", description="d", format="int32", priority=1
        ),
    ),
    scale=Scale(".spec.size", ".status.replicas", ".status.selector"),
)
@dataclass
class Thing:
    spec: ThingSpec
    status: ThingStatus | None = None
    metadata: MetadataField = MetadataField()


@custom_resource(group="example.com", version="v2", kind="Thing", storage=True, served=False)
@dataclass
class ThingV2:
    spec: ThingSpec
    metadata: MetadataField = MetadataField()


def test_resource_info_defaults_and_addresses() -> None:
    info = resource_info(Thing)
    assert (info.kind, info.singular, info.plural, info.scope) == (
        "Thing",
        "thing",
        "things",
        Scope.NAMESPACED,
    )
    assert info.api_version == "example.com/v1"
    assert info.crd_name == "things.example.com"
    assert str(info.gvr) == "things.v1.example.com"
    assert info.gvk.kind == "Thing"


def test_a_single_version_manifest() -> None:
    manifest = crd_manifest(Thing)
    assert manifest["metadata"] == {"name": "things.example.com"}
    spec = manifest["spec"]
    assert spec["names"] == {
        "kind": "Thing",
        "listKind": "ThingList",
        "plural": "things",
        "singular": "thing",
        "shortNames": ["th"],
        "categories": ["all"],
    }
    assert spec["scope"] == "Namespaced"
    assert "conversion" not in spec
    assert "shortNames" in spec["names"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.size",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    assert version["additionalPrinterColumns"] == [
        {
            "name": "Size",
            "type": "integer",
            "jsonPath": ".spec.size",
            "description": "d",
            "format": "int32",
            "priority": 1,
        }
    ]
    root = version["schema"]["openAPIV3Schema"]
    assert set(root["properties"]) == {"spec", "status"}  # metadata is the server's
    assert root["required"] == ["spec"]


def test_several_versions_one_storage_and_a_conversion_webhook() -> None:
    webhook = ConversionWebhook(
        service=ServiceReference("ops", "convert", path="/convert", port=8443), ca_bundle="Q0E="
    )
    spec = crd_manifest(Thing, ThingV2, conversion=webhook)["spec"]
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [
        ("v1", True, False),
        ("v2", False, True),
    ]
    assert spec["names"]["shortNames"] == ["th"]  # ThingV2 states none: Thing's apply
    assert "subresources" not in spec["versions"][1]  # no status field, no scale
    assert "additionalPrinterColumns" not in spec["versions"][1]
    assert spec["conversion"] == {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {
                "service": {
                    "namespace": "ops",
                    "name": "convert",
                    "path": "/convert",
                    "port": 8443,
                },
                "caBundle": "Q0E=",
            },
            "conversionReviewVersions": ["v1"],
        },
    }
    by_url = crd_manifest(Thing, ThingV2, conversion=ConversionWebhook(url="https://x/c"))
    assert by_url["spec"]["conversion"]["webhook"]["clientConfig"] == {"url": "https://x/c"}
    by_service = ConversionWebhook(service=ServiceReference("ops", "convert"))
    assert crd_manifest(Thing, ThingV2, conversion=by_service)["spec"]["conversion"]["webhook"][
        "clientConfig"
    ] == {"service": {"namespace": "ops", "name": "convert"}}


def test_a_cluster_scoped_resource_without_status() -> None:
    @custom_resource(group="example.com", version="v1", scope=Scope.CLUSTER, plural="flocks")
    @dataclass
    class Flock:
        status: int = 0
        metadata: MetadataField = MetadataField()

    @custom_resource(group="example.com", version="v1", status_subresource=False)
    @dataclass
    class Quiet:
        status: int = 0
        metadata: MetadataField = MetadataField()

    spec = crd_manifest(Flock)["spec"]
    assert spec["scope"] == "Cluster"
    assert spec["names"]["plural"] == "flocks"
    assert "shortNames" not in spec["names"]
    assert spec["versions"][0]["subresources"] == {"status": {}}
    assert "subresources" not in crd_manifest(Quiet)["spec"]["versions"][0]


@custom_resource(group="example.com", version="v1", kind="Thing")
@dataclass
class OtherV1:
    spec: ThingSpec
    metadata: MetadataField = MetadataField()


@custom_resource(group="other.com", version="v2", kind="Thing")
@dataclass
class OtherGroup:
    spec: ThingSpec
    metadata: MetadataField = MetadataField()


@custom_resource(group="example.com", version="v2", kind="Thing", short_names=("x",))
@dataclass
class OtherNames:
    spec: ThingSpec
    metadata: MetadataField = MetadataField()


@custom_resource(group="example.com", version="v3", kind="Thing")
@dataclass
class NoStorage:
    spec: ThingSpec
    metadata: MetadataField = MetadataField()


@custom_resource(group="example.com", version="v1", kind="Thing", storage=False)
@dataclass
class NotStored:
    spec: ThingSpec
    metadata: MetadataField = MetadataField()


def test_manifest_refusals() -> None:
    cases: list[tuple[tuple[type, ...], str]] = [
        ((Thing, OtherV1), "version v1 declared twice"),
        ((Thing, OtherGroup), "OtherGroup: group, kind, names and scope differ from Thing's"),
        ((Thing, OtherNames), "Thing: the versions declare different short names or categories"),
        ((Thing, NoStorage), "exactly one version must be storage=True, got []"),
        ((NotStored,), "exactly one version must be storage=True"),
        ((ThingV2, ThingV2), "declared twice"),
    ]
    for classes, words in cases:
        with pytest.raises(SchemaError) as caught:
            crd_manifest(*classes)
        assert words in str(caught.value)
    with pytest.raises(LocalProtocolError, match="at least one class"):
        crd_manifest()
    with pytest.raises(LocalProtocolError, match="exactly one of service and url"):
        crd_manifest(Thing, conversion=ConversionWebhook())
    with pytest.raises(SchemaError, match="Inner is not declared with @custom_resource"):
        crd_manifest(Inner)


def _declared(**options: Any) -> type:
    @dataclass
    class Res:
        spec: ThingSpec
        status: ThingStatus | None = None
        metadata: MetadataField = MetadataField()

    decorated: type = custom_resource(**{"group": "example.com", "version": "v1", **options})(Res)
    return decorated


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"group": "Example.com"}, "invalid group"),
        ({"group": "example"}, "a CRD group needs a dot"),
        ({"version": "V1"}, "invalid version"),
        ({"kind": "lower"}, "kind must be CamelCase"),
        ({"plural": "Res"}, "invalid resource"),
        ({"singular": "Res", "plural": "res"}, "singular must be a lowercase DNS label"),
        ({"short_names": ("a_b",)}, "short name must be a lowercase DNS label"),
        ({"categories": ("A",)}, "category must be a lowercase DNS label"),
        ({"printer_columns": (PrinterColumn("", ".a"),)}, "printer column needs a name"),
        ({"printer_columns": (PrinterColumn("A", "a"),)}, "printer column needs a name"),
        ({"printer_columns": (PrinterColumn("A", ".a", type="time"),)}, "type must be one of"),  # type: ignore[arg-type]
        ({"printer_columns": (PrinterColumn("A", ".a", priority=-1),)}, "type must be one of"),
    ],
)
def test_declaration_refusals(options: dict[str, Any], words: str) -> None:
    with pytest.raises(SchemaError, match="^Res: ") as caught:
        _declared(**options)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("scale", "words"),
    [
        (Scale(".spec.size", ".spec.size"), "must be under .status"),
        (Scale(".status.replicas", ".status.replicas"), "must be under .spec"),
        (Scale(".spec.nothing", ".status.replicas"), "names no declared field"),
        (Scale(".spec.size.deeper", ".status.replicas"), "names no declared field"),
        (Scale(".spec.selector", ".status.replicas"), "must name a integer field"),
        (Scale(".spec.size", ".status.inner.name"), "must name a integer field"),
        (Scale(".spec.size", ".status.replicas", ".status.replicas"), "must name a string field"),
    ],
)
def test_scale_paths_must_name_declared_fields(scale: Scale, words: str) -> None:
    with pytest.raises(SchemaError, match="Res: scale path") as caught:
        crd_manifest(_declared(scale=scale))
    assert words in str(caught.value)


def test_resource_declaration_refusals() -> None:
    with pytest.raises(SchemaError, match="custom_resource needs a dataclass"):
        custom_resource(group="example.com", version="v1")(int)

    @custom_resource(group="example.com", version="v1")
    @dataclass
    class NoMetadata:
        spec: ThingSpec

    @custom_resource(group="example.com", version="v1")
    @dataclass
    class BadMetadata:
        metadata: dict[str, str]

    @custom_resource(group="example.com", version="v1")
    @dataclass
    class DictMetadata:  # the declaration of earlier releases
        metadata: dict[str, Any] = field(default_factory=dict)

    @custom_resource(group="example.com", version="v1")
    @dataclass
    class Reserved:
        kind: str
        metadata: MetadataField = MetadataField()

    @custom_resource(group="example.com", version="v1", status_subresource=True)
    @dataclass
    class NoStatus:
        metadata: MetadataField = MetadataField()

    for cls, words in [
        (NoMetadata, "NoMetadata: a resource needs a field metadata: MetadataField = Meta"),
        (BadMetadata, "BadMetadata.metadata: metadata: MetadataField = MetadataField()"),
        (DictMetadata, "DictMetadata.metadata: metadata: MetadataField = MetadataField() (an "),
        (Reserved, "Reserved.kind: 'kind' is reserved in a resource"),
        (NoStatus, "NoStatus: a status subresource needs a status field"),
    ]:
        with pytest.raises(SchemaError) as caught:
            crd_manifest(cls)
        assert words in str(caught.value)


def test_a_subclass_of_a_resource_is_not_the_resource() -> None:
    @dataclass
    class Derived(Thing):
        extra: str = ""

    with pytest.raises(SchemaError, match="not declared with @custom_resource"):
        resource_info(Derived)
    # As a plain dataclass, metadata is an ordinary field.
    assert "metadata" in openapi_schema(Derived)["properties"]


def test_every_generated_schema_is_structural() -> None:
    from configmirror._api import ConfigMirror

    for cls in (Thing, ThingV2, ConfigMirror):
        assert_structural(crd_manifest(cls)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def assert_structural(node: dict[str, Any]) -> None:
    """Kubernetes' structural rules: typed nodes, no additionalProperties beside properties."""
    untyped_ok = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    assert "type" in node or untyped_ok, node
    assert not ("properties" in node and "additionalProperties" in node), node
    for key in ("anyOf", "oneOf", "allOf", "not", "$ref"):
        assert key not in node
    for child in (node.get("properties") or {}).values():
        assert_structural(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            assert_structural(node[key])


def test_a_scale_subresource_without_a_label_selector() -> None:
    with pytest.raises(SchemaError, match="names no declared field"):
        crd_manifest(_declared(scale=Scale(".spec.replicas")))
    scale = crd_manifest(_declared(scale=Scale(".spec.size")))["spec"]["versions"][0]
    assert scale["subresources"]["scale"] == {
        "specReplicasPath": ".spec.size",
        "statusReplicasPath": ".status.replicas",
    }
