"""The generated built-in kinds: current with the spec, and decoding as the spec says."""

from __future__ import annotations

import gzip
import pathlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from kubemoon_core import GroupVersionResource, Scope, builtin
from kubemoon_core.builtin import (
    CONFIGMAPS,
    CUSTOMRESOURCEDEFINITIONS,
    LEASES,
    NAMESPACES,
    ConfigMap,
    CustomResourceDefinition,
    Deployment,
    Lease,
    Namespace,
    apiextensions_v1,
    meta_v1,
    networking_v1,
)
from kubemoon_core.errors import SchemaError, TypedDecodeError
from kubemoon_core.typed import (
    MetadataField,
    crd_manifest,
    custom_resource,
    decode,
    encode,
    resource_info,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_builtins.py"
GO_SPEC = (
    pathlib.Path.home()
    / "go/pkg/mod/k8s.io/kubernetes@v1.37.2/api/openapi-spec/v3/api__v1_openapi.json"
)


def test_the_generated_modules_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_check_reports_a_hand_edit(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gen_builtins
    finally:
        sys.path.remove(str(SCRIPT.parent))
    out = tmp_path / "builtin"
    out.mkdir()
    for path in (ROOT / "kubemoon_core" / "builtin").glob("*.py"):
        (out / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(gen_builtins, "OUT", out)
    assert gen_builtins.main(["--check"]) == 0
    (out / "coordination_v1.py").write_text("# edited\n", encoding="utf-8")
    (out / "stray.py").write_text("", encoding="utf-8")
    assert gen_builtins.main(["--check"]) == 1


@pytest.mark.skipif(not GO_SPEC.exists(), reason="the Go module cache has no k8s.io/kubernetes")
def test_the_committed_spec_is_the_apiservers() -> None:
    for path in (ROOT / "scripts" / "openapi" / "v1.37.2").glob("*.json.gz"):
        go_file = GO_SPEC.parent / path.name.removesuffix(".gz")
        assert gzip.decompress(path.read_bytes()) == go_file.read_bytes(), path.name


def test_every_exported_name_is_documented_once() -> None:
    names = builtin.__all__
    assert len(names) == len(set(names))
    for name in names:
        obj = getattr(builtin, name)
        if isinstance(obj, type):
            assert obj.__doc__, name
            assert resource_info(obj).builtin
    for module in (builtin.core_v1, builtin.apps_v1, meta_v1, apiextensions_v1):
        assert module.__all__ and module.__doc__


@pytest.mark.parametrize(
    ("cls", "gvr", "scope", "api_version"),
    [
        (ConfigMap, CONFIGMAPS, Scope.NAMESPACED, "v1"),
        (Namespace, NAMESPACES, Scope.CLUSTER, "v1"),
        (Lease, LEASES, Scope.NAMESPACED, "coordination.k8s.io/v1"),
        (
            CustomResourceDefinition,
            CUSTOMRESOURCEDEFINITIONS,
            Scope.CLUSTER,
            "apiextensions.k8s.io/v1",
        ),
    ],
)
def test_each_kind_has_its_resource(
    cls: type, gvr: GroupVersionResource, scope: Scope, api_version: str
) -> None:
    info = resource_info(cls)
    assert (info.gvr, info.scope, info.api_version, info.kind) == (
        gvr,
        scope,
        api_version,
        cls.__name__,
    )


def test_a_config_map_decodes_and_fills_in_its_kind() -> None:
    cm = decode(ConfigMap, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    assert cm.data == {"k": "v"}
    assert encode(cm) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a"},
        "data": {"k": "v"},
    }


@pytest.mark.parametrize(
    ("obj", "path", "words"),
    [
        ({"apiVersion": "apps/v2"}, ".apiVersion", "expected apps/v1"),
        ({"spec": {"replicas": "2"}}, ".spec.replicas", "expected int"),
        ({"spec": {"selector": {}}}, ".spec.template", "required field is missing"),
        (
            {
                "spec": {
                    "selector": {},
                    "template": {"spec": {"containers": [{"name": "a"}, {"image": "b"}]}},
                }
            },
            ".spec.template.spec.containers[1].name",
            "required field is missing",
        ),
        (
            {
                "spec": {
                    "selector": {},
                    "template": {},
                    "strategy": {"rollingUpdate": {"maxSurge": 0.5}},
                }
            },
            ".spec.strategy.rollingUpdate.maxSurge",
            "expected int or str, got float",
        ),
        ({"spec": {"selector": {}, "template": {}, "paused": 1}}, ".spec.paused", "expected bool"),
        (
            {"spec": {"selector": {}, "template": {}}, "status": {"replicas": 1, "color": "red"}},
            ".status.color",
            "unknown field",
        ),
        ({"metadata": {}}, ".spec", "required field is missing"),
    ],
)
def test_a_bad_deployment_names_the_path(obj: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(TypedDecodeError) as caught:
        decode(Deployment, obj)
    assert caught.value.path == path
    assert words in str(caught.value)


def test_int_or_string_quantity_and_time_are_kept_as_sent() -> None:
    body = {
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}
                    ]
                }
            },
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
        },
        "status": {
            "conditions": [
                {"type": "Available", "status": "True", "lastUpdateTime": "2026-12-01T10:00:00Z"}
            ]
        },
    }
    typed = decode(Deployment, body)
    assert typed.spec is not None and typed.spec.strategy is not None
    assert typed.spec.strategy.rolling_update is not None
    assert typed.spec.strategy.rolling_update.max_surge == "25%"
    assert typed.spec.strategy.rolling_update.max_unavailable == 1
    assert typed.status is not None and typed.status.conditions is not None
    assert typed.status.conditions[0].last_update_time == "2026-12-01T10:00:00Z"
    assert encode(typed) == {"apiVersion": "apps/v1", "kind": "Deployment", **body}


def test_json_names_that_are_python_keywords_or_not_identifiers() -> None:
    meta = decode(meta_v1.ListMeta, {"continue": "token", "resourceVersion": "5"})
    assert meta.continue_ == "token"
    rule = decode(networking_v1.NetworkPolicyIngressRule, {"from": [{"podSelector": {}}]})
    assert rule.from_ is not None and rule.from_[0].pod_selector == meta_v1.LabelSelector()
    props = decode(apiextensions_v1.JSONSchemaProps, {"$ref": "#/x", "not": {"type": "string"}})
    assert props.ref == "#/x"
    assert encode(props) == {"$ref": "#/x", "not": {"type": "string"}}


def test_the_recursive_json_schema_props_decode_at_any_depth() -> None:
    leaf: dict[str, Any] = {"type": "string", "maxLength": 3}
    schema: dict[str, Any] = {"type": "object", "properties": {"a": leaf}}
    for _ in range(20):
        schema = {"type": "object", "properties": {"n": schema}, "allOf": [dict(leaf)]}
    typed = decode(apiextensions_v1.JSONSchemaProps, schema)
    assert encode(typed) == schema
    inner = typed
    for _ in range(20):
        assert inner.properties is not None
        inner = inner.properties["n"]
    assert inner.properties is not None and inner.properties["a"].max_length == 3
    schema["properties"]["n"]["properties"]["n"]["allOf"][0]["maxLength"] = "3"
    with pytest.raises(TypedDecodeError) as caught:
        decode(apiextensions_v1.JSONSchemaProps, schema)
    assert caught.value.path == ".properties.n.properties.n.allOf[0].maxLength"


@dataclass(slots=True)
class Tree:
    children: list[Tree] | None = None
    label: str | None = None


@custom_resource(group="example.com", version="v1")
@dataclass(slots=True)
class Forest:
    tree: Tree
    metadata: MetadataField = MetadataField()


def test_a_user_class_may_contain_itself_but_is_no_crd() -> None:
    forest = decode(Forest, {"tree": {"children": [{"label": "a"}, {"children": []}]}})
    assert forest.tree.children is not None and forest.tree.children[0].label == "a"
    assert encode(forest)["tree"] == {"children": [{"label": "a"}, {"children": []}]}
    with pytest.raises(SchemaError, match="Tree contains itself"):
        crd_manifest(Forest)


def test_a_builtin_kind_is_no_crd() -> None:
    with pytest.raises(SchemaError, match="ConfigMap is a built-in kind"):
        crd_manifest(ConfigMap)
