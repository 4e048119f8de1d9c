"""Differential: the simulated API server against the real kube-apiserver (issue 32).

The same Hypothesis-generated sequence of requests (creates, updates with current, stale
or no resourceVersion, merge patches, status updates, deletes with finalizers and
propagation policies, finalizer removal, gets and paged lists) runs against a fresh
namespace on kube-apiserver and on a fresh :class:`SimApiServer`. Every answer must agree
in status code, reason, message and object contents once generated values (uids,
timestamps, resourceVersion numbers, managedFields) are normalised; whether each answer's
resourceVersion moved is compared too. The sequences use a ConfigMap and a custom resource
whose CRD keeps unknown fields and has a status subresource (what ``custom(...)`` models).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kubemoon_core import GroupVersionResource, Request
from kubemoon_testing import ApiServer
from kubemoon_testing.sim import SimApiServer, SimWatch, custom, handle_request

pytestmark = pytest.mark.integration

GROUP = "sim.kubemoon.dev"
WIDGETS = custom(GROUP, "v1", "simwidgets", "SimWidget")
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"simwidgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "simwidgets", "singular": "simwidget", "kind": "SimWidget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
NAMES = ("a", "b")
FINALIZER = "sim.kubemoon.dev/hold"


@dataclass(frozen=True)
class Kind:
    path: str  # collection path under /namespaces/{ns}
    api_version: str
    kind: str
    custom: bool

    def body(self, name: str, value: int, finalizers: bool, labels: bool) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name}
        if finalizers:
            metadata["finalizers"] = [FINALIZER]
        if labels:
            metadata["labels"] = {"tier": f"t{value % 2}"}
        obj: dict[str, Any] = {"apiVersion": self.api_version, "kind": self.kind}
        obj["metadata"] = metadata
        if self.custom:
            obj["spec"] = {"size": value}
            obj["status"] = {"ready": value}
        else:
            obj["data"] = {"k": str(value)}
        return obj


KINDS = (
    Kind("/api/v1/namespaces/{ns}/configmaps", "v1", "ConfigMap", False),
    Kind(f"/apis/{GROUP}/v1/namespaces/{{ns}}/simwidgets", f"{GROUP}/v1", "SimWidget", True),
)


@dataclass
class Side:
    """One server under test, and what the sequence has seen of it."""

    name: str
    send: Any  # (method, path, body, content_type) -> (status, document)
    namespace: str
    seen: dict[str, list[str]] = field(default_factory=dict)  # name -> resourceVersions
    last: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> last object

    def path(self, kind: Kind, name: str | None = None, sub: str | None = None) -> str:
        base = kind.path.format(ns=self.namespace)
        return base + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def _generated(value: Any, side: Side) -> Any:
    """``value`` with generated values replaced by stable markers."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "managedFields":
                continue
            if key in ("uid", "creationTimestamp", "deletionTimestamp") and isinstance(item, str):
                out[key] = "<set>"
            elif key == "resourceVersion" and isinstance(item, str):
                out[key] = "<rv>"
            elif key == "continue" and isinstance(item, str) and item:
                out[key] = "<token>"
            elif key == "namespace" and item == side.namespace:
                out[key] = "<ns>"
            else:
                out[key] = _generated(item, side)
        return out
    if isinstance(value, list):
        return [_generated(item, side) for item in value]
    if isinstance(value, str):
        return value.replace(side.namespace, "<ns>")
    return value


def _observe(side: Side, status: int, document: Any) -> dict[str, Any]:
    """The normalised answer, with whether the object's resourceVersion moved."""
    outcome: dict[str, Any] = {"code": status, "body": _generated(document, side)}
    metadata = document.get("metadata") if isinstance(document, dict) else None
    if (
        isinstance(metadata, dict)
        and document.get("kind") not in (None, "Status")
        and not document.get("kind", "").endswith("List")
    ):
        name, rv = metadata.get("name"), metadata.get("resourceVersion")
        history = side.seen.setdefault(name, [])
        outcome["rv_moved"] = not history or history[-1] != rv
        if rv not in history:
            history.append(rv)
        side.last[name] = document
    return outcome


# Sequences that always run (besides the generated ones): the paths where registries
# differ most, so a change in any of them fails the test whatever Hypothesis draws.
LIFECYCLE = [("create", "a", 0, True, True), ("delete", "a", None), ("release", "a")]
CONCURRENCY = [
    ("create", "a", 0, False, False),
    ("update", "a", 1, "current"),
    ("update", "a", 2, "stale"),
    ("update", "a", 3, "none"),
    ("status", "a", 1),
    ("patch", "a", 2, True),
    ("delete", "a", None),
    ("get", "a"),
]
POLICIES = [
    ("create", "a", 0, True, True),
    ("delete", "a", "Orphan"),
    ("delete", "a", "Foreground"),
    ("delete", "a", None),
    ("create", "a", 1, False, True),
    ("release", "a"),
    ("create", "b", 0, False, True),
    ("delete", "b", "Foreground"),
    ("get", "b"),
]
SELECTED = [
    ("create", "a", 1, False, True),
    ("patch", "a", 0, True),
    ("update", "a", 1, "current"),
    ("create", "b", 3, False, True),
    ("delete", "b", None),
]
PAGES = [
    ("create", "a", 1, False, True),
    ("create", "b", 1, False, True),
    ("list", 1, False),
    ("list", 1, True),
    ("delete", "a", None),
    ("list", 1, False),
]


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    count = draw(st.integers(min_value=1, max_value=14))
    # Most sequences start from an object, so the later steps have something to act on.
    out: list[tuple[Any, ...]] = [("create", "a", 0, draw(st.booleans()), True)]
    for _ in range(count):
        name = draw(st.sampled_from(NAMES))
        op = draw(
            st.sampled_from(
                # Deletions and finalizer releases weigh double: the lifecycle of a
                # finalized object is where registries differ most.
                (
                    "create",
                    "update",
                    "patch",
                    "status",
                    "delete",
                    "delete",
                    "release",
                    "release",
                    "get",
                    "list",
                )
            )
        )
        if op == "create":
            out.append(("create", name, draw(st.integers(0, 3)), draw(st.booleans()), True))
        elif op == "update":
            rv = draw(st.sampled_from(("current", "stale", "none")))
            out.append(("update", name, draw(st.integers(0, 3)), rv))
        elif op == "patch":
            out.append(("patch", name, draw(st.integers(0, 3)), draw(st.booleans())))
        elif op == "status":
            out.append(("status", name, draw(st.integers(0, 3))))
        elif op == "delete":
            policy = draw(st.sampled_from((None, "Background", "Orphan", "Foreground")))
            out.append(("delete", name, policy))
        elif op == "list":
            out.append(("list", draw(st.integers(1, 3)), draw(st.booleans())))
        else:
            out.append((op, name))
    return out


def _run(side: Side, kind: Kind, step: tuple[Any, ...]) -> list[dict[str, Any]]:
    op = step[0]
    send = side.send
    if op == "create":
        _, name, value, finalizers, labels = step
        return [
            _observe(
                side, *send("POST", side.path(kind), kind.body(name, value, finalizers, labels))
            )
        ]
    if op in ("update", "status"):
        name, value = step[1], step[2]
        last = side.last.get(name)
        base = json.loads(json.dumps(last)) if last else kind.body(name, value, False, False)
        base.setdefault("metadata", {})["name"] = name
        if kind.custom:
            base["spec"] = {"size": value}
            base["status"] = {"ready": value + 10}
        else:
            base["data"] = {"k": str(value)}
        meta = base["metadata"]
        mode = step[3] if op == "update" else "current"
        history = side.seen.get(name, [])
        if mode == "stale":
            meta["resourceVersion"] = history[-2] if len(history) >= 2 else "1"
        elif mode == "none":
            meta.pop("resourceVersion", None)
        sub = "status" if op == "status" else None
        return [_observe(side, *send("PUT", side.path(kind, name, sub), base))]
    if op == "patch":
        _, name, value, labels = step
        patch: dict[str, Any] = {"metadata": {"labels": {"tier": f"p{value}"} if labels else None}}
        if kind.custom:
            patch["spec"] = {"size": value}
        else:
            patch["data"] = {"p": str(value)}
        return [
            _observe(
                side,
                *send("PATCH", side.path(kind, name), patch, "application/merge-patch+json"),
            )
        ]
    if op == "release":
        name = step[1]
        patch = {"metadata": {"finalizers": None}}
        return [
            _observe(
                side,
                *send("PATCH", side.path(kind, name), patch, "application/merge-patch+json"),
            )
        ]
    if op == "delete":
        _, name, policy = step
        body = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if policy:
            body["propagationPolicy"] = policy
        return [_observe(side, *send("DELETE", side.path(kind, name), body))]
    if op == "get":
        return [_observe(side, *send("GET", side.path(kind, step[1])))]
    # A paged list, page after page.
    _, limit, by_label = step
    pages = []
    token = ""
    for _ in range(5):
        query = f"?limit={limit}" + (f"&continue={token}" if token else "")
        if by_label:
            query += "&labelSelector=tier%3Dt1"
        status, document = send("GET", side.path(kind) + query)
        pages.append(_observe(side, status, document))
        token = (document.get("metadata") or {}).get("continue") or ""
        if status != 200 or not token:
            break
    return pages


def _real(server: ApiServer) -> Any:
    def send(
        method: str, path: str, body: Any = None, content_type: str | None = None
    ) -> tuple[int, Any]:
        headers = {"Content-Type": content_type} if content_type else None
        response = server.request(method, path, body=body, headers=headers)
        if "watch=1" in path:  # read to its end (timeoutSeconds)
            return response.status, response.events()
        return response.status, response.json()

    return send


def _simulated(model: SimApiServer) -> Any:
    clock = [0.0]

    def send(
        method: str, path: str, body: Any = None, content_type: str | None = None
    ) -> tuple[int, Any]:
        clock[0] += 1.0
        target, _, query = path.partition("?")
        pairs = tuple(tuple(item.split("=", 1)) for item in query.split("&") if item)
        request = Request(
            method,
            target,
            tuple((k, unquote(v)) for k, v in pairs),  # type: ignore[misc]
            (("Content-Type", content_type or "application/json"),),
            b"" if body is None else json.dumps(body).encode(),
        )
        answer = handle_request(model, request, clock[0])
        if isinstance(answer, SimWatch):  # everything until its deadline
            lines = answer.take(answer.deadline, model.resource_version)
            model.forget(answer)
            return 200, [{"type": line.type, "object": line.object} for line in lines]
        return answer.status_code, json.loads(answer.body)

    return send


@pytest.fixture(scope="module")
def differential_server(kube_apiserver_no_controllers: ApiServer) -> ApiServer:
    """A kube-apiserver without controllers (the simulator's garbage collector is off
    too: both answer as the bare registry does) with the SimWidget CRD installed."""
    kube_apiserver = kube_apiserver_no_controllers
    if f"simwidgets.{GROUP}" not in {
        item["metadata"]["name"]
        for item in kube_apiserver.request(
            "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        ).json()["items"]
    }:
        kube_apiserver.install_crds([CRD])
    return kube_apiserver


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_simulator_answers_as_kube_apiserver(differential_server: ApiServer, kind: Kind) -> None:
    @settings(
        max_examples=30,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(steps())
    @example(LIFECYCLE)
    @example(CONCURRENCY)
    @example(POLICIES)
    @example(PAGES)
    @example(SELECTED)
    def check(sequence: list[tuple[Any, ...]]) -> None:
        namespace = differential_server.create_namespace(prefix="sim-diff")
        real = Side("kube-apiserver", _real(differential_server), namespace)
        try:
            model = SimApiServer([WIDGETS], garbage_collector=False)
            model.create(
                model.resource(GroupVersionResource("", "v1", "namespaces")),
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                0.0,
            )
            sim = Side("simulator", _simulated(model), namespace)
            starts = {}
            for side in (real, sim):
                status, listed = side.send("GET", side.path(kind))
                assert status == 200, listed
                starts[side.name] = listed["metadata"]["resourceVersion"]
            for index, step in enumerate(sequence):
                expected = _run(real, kind, step)
                got = _run(sim, kind, step)
                assert got == expected, f"step {index} {step} of {sequence}"
            # The watch from before the sequence replays the same events.
            # The watches from before the sequence replay the same events, also through a
            # label selector (objects entering and leaving it).
            for selector in ("", "&labelSelector=tier%3Dt1"):
                replays = []
                for side in (real, sim):
                    query = f"?watch=1&resourceVersion={starts[side.name]}&timeoutSeconds=1"
                    status, events = side.send("GET", side.path(kind) + query + selector)
                    replays.append((status, _generated(events, side)))
                assert replays[1] == replays[0], f"the watch{selector} after {sequence}"
        finally:
            for name in NAMES:  # let the namespace go: release what holds it
                differential_server.request(
                    "PATCH",
                    real.path(kind, name),
                    body={"metadata": {"finalizers": None}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
            differential_server.delete_namespace(namespace)

    check()
