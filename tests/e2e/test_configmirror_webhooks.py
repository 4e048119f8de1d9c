"""ConfigMirror's webhooks, called by the real kube-apiserver over TLS.

The admission webhooks are served by :class:`configmirror.ConfigMirrorWebhooks` on a
:class:`kubemoon_trio.WebhookServer` at ``https://127.0.0.1:<port>``; each test installs
webhook configurations that select only its own namespace (by label), so nothing it
leaves behind can affect another test. The conversion webhook is the session's (see
conftest.py): the CRD stores v1beta1 and serves v1alpha1 too.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import (
    ConversionServer,
    StartOperator,
    accept_mirrors,
    crd_manifest,
    eventually,
    label_namespace,
    put_crd,
    uninstall_crd,
)
from overlays import rendered
from prometheus_client import CollectorRegistry

from configmirror import (
    CONFIGMAPS,
    CONFIGMIRRORS,
    CONFIGMIRRORS_V1BETA1,
    FINALIZER,
    MUTATE_PATH,
    VALIDATE_PATH,
    ConfigMirrorWebhooks,
)
from configmirror._api import ConfigMirror
from configmirror._convert import SELECTOR_ANNOTATION
from configmirror._webhooks import DECISION_TTL
from kubemoon_core import ApiError, GroupVersionResource, PatchType, WriteOptions, delete_request
from kubemoon_core.errors import Invalid, NotFound
from kubemoon_core.typed import crd_manifest as generated_crd
from kubemoon_core.webhooks import ca_bundle_patch
from kubemoon_testing import ApiServer, WebhookCertificates
from kubemoon_trio import Client, WebhookServer

pytestmark = pytest.mark.integration

NAMESPACES = GroupVersionResource("", "v1", "namespaces")
VALIDATING = GroupVersionResource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"
)
MUTATING = GroupVersionResource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"
)
TEST_LABEL = "kubemoon.dev/configmirror-webhook-test"


def mirror(name: str, targets: list[str], source: str = "settings") -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": name},
        "spec": {"source": source, "targetNamespaces": targets},
    }


class Served:
    """The ConfigMirror webhooks on a server in the test's nursery; stoppable."""

    def __init__(self, nursery: trio.Nursery, certs: WebhookCertificates, client: Client) -> None:
        self.nursery = nursery
        self.certs = certs
        self.hooks = ConfigMirrorWebhooks(client)
        self.app = self.hooks.app()
        self.port = 0
        self._scope = trio.CancelScope()
        self._stopped = trio.Event()

    async def start(self) -> None:
        server = WebhookServer(
            self.app,
            cert_file=self.certs.cert_file,
            key_file=self.certs.key_file,
            port=self.port,
            registry=CollectorRegistry(),
        )
        scope, stopped = trio.CancelScope(), trio.Event()

        async def run(task_status: trio.TaskStatus[int]) -> None:
            try:
                with scope:
                    await server.serve(task_status=task_status)
            finally:
                stopped.set()

        self.port = await self.nursery.start(run)
        self._scope, self._stopped = scope, stopped

    async def stop(self) -> None:
        self._scope.cancel()
        await self._stopped.wait()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"


def configuration(kind: str, url: str, namespace: str) -> dict[str, Any]:
    short = "validate" if kind.startswith("Validating") else "default"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": f"configmirror-{short}-{namespace}"},
        "webhooks": [
            {
                "name": f"{short}.configmirror.kubemoon.dev",
                "clientConfig": {"url": url},
                "rules": [
                    {
                        "apiGroups": ["kubemoon.dev"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["configmirrors"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {TEST_LABEL: namespace}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
        ],
    }


async def install(client: Client, obj: dict[str, Any], bundle: bytes) -> None:
    """Create a configuration, then inject the CA bundle (as the operator's installer does)."""
    resource = VALIDATING if obj["kind"].startswith("Validating") else MUTATING
    created = await client.create(resource, obj)
    for _ in range(10):
        try:
            await client.request(ca_bundle_patch(created, bundle))
            return
        except Invalid:  # changed since it was read: read it again
            created = await client.get(resource, obj["metadata"]["name"])
    raise AssertionError("the CA bundle could not be injected")


@pytest.fixture
async def home(client: Client, kube_namespace: str) -> str:
    """The test's namespace, labelled so that the test's webhook configurations select it."""
    await client.patch(
        NAMESPACES, kube_namespace, {"metadata": {"labels": {TEST_LABEL: kube_namespace}}}
    )
    return kube_namespace


@contextlib.asynccontextmanager
async def serving(
    client: Client, nursery: trio.Nursery, directory: Path, home: str
) -> AsyncIterator[Served]:
    """The webhooks served and registered (validating and mutating) for ``home``."""
    hooks = Served(nursery, WebhookCertificates.create(directory / "certs"), client)
    await hooks.start()
    validating = configuration("ValidatingWebhookConfiguration", hooks.url(VALIDATE_PATH), home)
    mutating = configuration("MutatingWebhookConfiguration", hooks.url(MUTATE_PATH), home)
    try:
        await install(client, validating, hooks.certs.ca_bundle)
        await install(client, mutating, hooks.certs.ca_bundle)
        await enforced(client, home)
        yield hooks
    finally:
        await client.send(delete_request(VALIDATING, validating["metadata"]["name"]))
        await client.send(delete_request(MUTATING, mutating["metadata"]["name"]))
        await hooks.stop()
        await hooks.hooks.aclose()


@pytest.fixture
async def served(
    client: Client, nursery: trio.Nursery, tmp_path: Path, home: str
) -> AsyncIterator[Served]:
    """The webhooks served and registered (validating and mutating) for ``home``."""
    async with serving(client, nursery, tmp_path, home) as hooks:
        yield hooks


async def enforced(client: Client, namespace: str) -> None:
    """Wait until the apiserver calls the webhooks (its configuration informer lags)."""
    with trio.move_on_after(30):
        while True:
            try:
                await client.create(
                    CONFIGMIRRORS,
                    mirror("probe", [namespace]),
                    namespace=namespace,
                    options=WriteOptions(dry_run=True),
                )
            except ApiError as exc:
                if "own namespace" in str(exc):
                    return
            await trio.sleep(0.1)
    raise AssertionError("the ConfigMirror webhooks were never called")


async def test_an_invalid_mirror_is_rejected_with_the_webhooks_message(
    client: Client, served: Served, home: str
) -> None:
    with pytest.raises(ApiError) as info:
        await client.create(CONFIGMIRRORS, mirror("bad", ["other", home]), namespace=home)
    message = str(info.value)
    assert info.value.code == 422
    assert 'admission webhook "validate.configmirror.kubemoon.dev" denied the request' in message
    assert f"target namespace {home!r} is the ConfigMirror's own namespace" in message
    with pytest.raises(NotFound):
        await client.get(CONFIGMIRRORS, "bad", namespace=home)


async def test_too_many_targets_are_refused_by_the_webhook(
    client: Client, served: Served, home: str
) -> None:
    # The schema allows 256 targets; the webhook's limit is 100.
    targets = [f"t-{i:03d}" for i in range(101)]
    with pytest.raises(ApiError, match="at most 100 target namespaces, got 101"):
        await client.create(CONFIGMIRRORS, mirror("many", targets), namespace=home)


async def test_a_valid_mirror_is_defaulted_and_stored(
    client: Client, served: Served, home: str
) -> None:
    stored = await client.create(
        CONFIGMIRRORS, mirror("good", ["zeta", "alpha", "mid"]), namespace=home
    )
    assert stored["spec"]["targetNamespaces"] == ["alpha", "mid", "zeta"]
    assert stored["metadata"]["labels"] == {"kubemoon.dev/mirror-source": "settings"}
    read = await client.get(CONFIGMIRRORS, "good", namespace=home)
    assert read["spec"] == stored["spec"]


async def test_a_dry_run_create_runs_the_webhooks_and_stores_nothing(
    client: Client, served: Served, home: str
) -> None:
    answered = await client.create(
        CONFIGMIRRORS, mirror("dry", ["b", "a"]), namespace=home, options=WriteOptions(dry_run=True)
    )
    assert answered["spec"]["targetNamespaces"] == ["a", "b"]  # the mutating webhook ran
    with pytest.raises(NotFound):
        await client.get(CONFIGMIRRORS, "dry", namespace=home)
    with pytest.raises(ApiError, match="own namespace"):  # and so did the validating one
        await client.create(
            CONFIGMIRRORS,
            mirror("dry-bad", [home]),
            namespace=home,
            options=WriteOptions(dry_run=True),
        )


async def test_failure_policy_fail_with_the_webhook_stopped(
    client: Client, served: Served, home: str
) -> None:
    await served.stop()
    name = f"while-down-{secrets.token_hex(2)}"
    with pytest.raises(ApiError) as info:
        await client.create(CONFIGMIRRORS, mirror(name, ["other"]), namespace=home)
    assert info.value.code == 500
    assert "failed calling webhook" in str(info.value)
    # A new connection is refused; a kept-alive one the stopped server closed breaks when
    # the apiserver writes to it before it has seen the close.
    assert any(
        why in str(info.value) for why in ("connection refused", "broken pipe", "connection reset")
    ), str(info.value)
    with pytest.raises(NotFound):
        await client.get(CONFIGMIRRORS, name, namespace=home)
    await served.start()  # the same port: admissions work again
    created = await client.create(CONFIGMIRRORS, mirror(name, ["other"]), namespace=home)
    assert created["metadata"]["name"] == name


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """What must not change between reads: everything but apiVersion and managedFields."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**{k: v for k, v in obj.items() if k != "apiVersion"}, "metadata": meta}


async def test_a_v1alpha1_mirror_reads_back_in_both_versions(client: Client, home: str) -> None:
    created = await client.create(
        CONFIGMIRRORS, mirror("versions", ["b-ns", "a-ns"]), namespace=home
    )
    as_beta = await client.get(CONFIGMIRRORS_V1BETA1, "versions", namespace=home)
    assert as_beta["apiVersion"] == "kubemoon.dev/v1beta1"
    assert as_beta["spec"] == {"source": "settings", "targets": {"namespaces": ["b-ns", "a-ns"]}}
    assert as_beta["metadata"]["uid"] == created["metadata"]["uid"]
    assert as_beta["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    as_alpha = await client.get(CONFIGMIRRORS, "versions", namespace=home)
    assert as_alpha["apiVersion"] == "kubemoon.dev/v1alpha1"
    assert comparable(as_alpha) == comparable(created)
    # A list in either version has it too (one conversion review for the page).
    listed = [m async for m in client.list(CONFIGMIRRORS_V1BETA1, namespace=home)]
    assert [m["spec"]["targets"]["namespaces"] for m in listed] == [["b-ns", "a-ns"]]


async def test_a_v1beta1_selector_survives_a_v1alpha1_update(client: Client, home: str) -> None:
    beta = {
        "apiVersion": "kubemoon.dev/v1beta1",
        "kind": "ConfigMirror",
        "metadata": {"name": "selecting"},
        "spec": {
            "source": "settings",
            "targets": {"namespaces": ["x"], "namespaceSelector": {"matchLabels": {"t": "y"}}},
        },
    }
    await client.create(CONFIGMIRRORS_V1BETA1, beta, namespace=home)
    alpha = await client.get(CONFIGMIRRORS, "selecting", namespace=home)
    assert alpha["spec"] == {"source": "settings", "targetNamespaces": ["x"]}
    # A v1alpha1 client edits what it knows; the selector it cannot see is kept.
    alpha["spec"]["targetNamespaces"] = ["x", "z"]
    await client.replace(CONFIGMIRRORS, alpha, namespace=home)
    again = await client.get(CONFIGMIRRORS_V1BETA1, "selecting", namespace=home)
    assert again["spec"]["targets"] == {
        "namespaces": ["x", "z"],
        "namespaceSelector": {"matchLabels": {"t": "y"}},
    }
    assert "annotations" not in again["metadata"]


async def test_objects_stored_before_the_upgrade_are_served_in_both_versions(
    configmirror_api: ApiServer, conversion_webhook: ConversionServer, client: Client, home: str
) -> None:
    server = configmirror_api
    # The v1alpha1-only CRD, as released before v1beta1, with objects stored in v1alpha1.
    await trio.to_thread.run_sync(lambda: uninstall_crd(server))
    old = generated_crd(ConfigMirror)
    await trio.to_thread.run_sync(lambda: put_crd(server, old))
    before = [
        await client.create(CONFIGMIRRORS, mirror(f"old-{i}", [f"t-{i}"]), namespace=home)
        for i in range(3)
    ]
    # The upgrade: v1beta1 becomes the storage version, converted by the webhook.
    await trio.to_thread.run_sync(lambda: put_crd(server, crd_manifest(conversion_webhook)))
    for i, stored in enumerate(before):
        name = stored["metadata"]["name"]
        alpha = await client.get(CONFIGMIRRORS, name, namespace=home)
        assert comparable(alpha) == comparable(stored)
        beta = await client.get(CONFIGMIRRORS_V1BETA1, name, namespace=home)
        assert beta["spec"] == {"source": "settings", "targets": {"namespaces": [f"t-{i}"]}}
        assert beta["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    names = [
        m["metadata"]["name"] async for m in client.list(CONFIGMIRRORS_V1BETA1, namespace=home)
    ]
    assert sorted(names) == ["old-0", "old-1", "old-2"]
    # And the old objects can be written in the new version.
    beta = await client.get(CONFIGMIRRORS_V1BETA1, "old-0", namespace=home)
    beta["spec"]["targets"]["namespaces"].append("t-new")
    written = await client.replace(CONFIGMIRRORS_V1BETA1, beta, namespace=home)
    assert written["spec"]["targets"]["namespaces"] == ["t-0", "t-new"]
    alpha = await client.get(CONFIGMIRRORS, "old-0", namespace=home)
    assert alpha["spec"]["targetNamespaces"] == ["t-0", "t-new"]


def test_the_deployed_webhook_configurations_are_valid(configmirror_api: ApiServer) -> None:
    documents = rendered("cert-manager")
    paths = {
        "ValidatingWebhookConfiguration": VALIDATING,
        "MutatingWebhookConfiguration": MUTATING,
    }
    checked = []
    for doc in documents:
        resource = paths.get(doc["kind"])
        if resource is None:
            continue  # the rest of the overlay: tests/e2e/test_deploy_overlays.py
        url = f"/apis/{resource.group}/{resource.version}/{resource.resource}?dryRun=All"
        answer = configmirror_api.request("POST", url, body=doc)
        assert answer.status == 201, answer.body[:500]
        (hook,) = doc["webhooks"]
        path = hook["clientConfig"]["service"]["path"]
        assert path in (VALIDATE_PATH, MUTATE_PATH)
        checked.append(doc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"])
    assert checked == ["kubemoon-system/configmirror-webhook"] * 2


async def test_the_operator_honours_a_v1beta1_namespace_selector(
    configmirror_api: ApiServer, client: Client, start_operator: StartOperator, home: str
) -> None:
    server = configmirror_api
    named, web, later = (server.create_namespace(prefix="cm-sel") for _ in range(3))
    for ns in (named, web, later):
        accept_mirrors(server, ns)
    label_namespace(server, web, {"tier": "web"})
    source = {"metadata": {"name": "settings"}, "data": {"a": "1"}}
    await client.create(CONFIGMAPS, source, namespace=home)
    beta = {
        "apiVersion": "kubemoon.dev/v1beta1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m"},
        "spec": {
            "source": "settings",
            "targets": {
                "namespaces": [named],
                "namespaceSelector": {"matchLabels": {"tier": "web"}},
            },
        },
    }
    await client.create(CONFIGMIRRORS_V1BETA1, beta, namespace=home)
    await start_operator(namespaces=(home,))

    async def copies() -> set[str]:
        found = set()
        for ns in (named, web, later):
            try:
                await client.get(CONFIGMAPS, "settings", namespace=ns)
                found.add(ns)
            except NotFound:
                pass
        return found

    await eventually(lambda: _equals(copies, {named, web}), what="copies in named + selected")
    # A namespace labelled later is selected at once (the Namespace watch re-reconciles).
    label_namespace(server, later, {"tier": "web"})
    await eventually(lambda: _equals(copies, {named, web, later}), what="the newly selected copy")
    # And one that stops matching loses its copy.
    label_namespace(server, web, {"tier": None})
    await eventually(lambda: _equals(copies, {named, later}), what="the unselected copy to go")
    for ns in (named, web, later):
        server.delete_namespace(ns)


async def _equals(check: Callable[[], Awaitable[set[str]]], expected: set[str]) -> bool:
    return await check() == expected


async def test_the_operator_serves_the_webhooks_itself(
    client: Client, start_operator: StartOperator, home: str, tmp_path: Path
) -> None:
    certs = WebhookCertificates.create(tmp_path / "operator-certs")
    replica = await start_operator(
        namespaces=(home,),
        webhook_address=("127.0.0.1", 0),
        webhook_cert_file=str(certs.cert_file),
        webhook_key_file=str(certs.key_file),
    )
    server = replica.operator.webhook_server
    assert server is not None and server.serving
    url = f"{server.url}{VALIDATE_PATH}"
    validating = configuration("ValidatingWebhookConfiguration", url, home)
    try:
        await install(client, validating, certs.ca_bundle)
        await enforced(client, home)
        with pytest.raises(ApiError, match="is the ConfigMirror's own namespace"):
            await client.create(CONFIGMIRRORS, mirror("own", [home]), namespace=home)
    finally:
        await client.send(delete_request(VALIDATING, validating["metadata"]["name"]))


# -- a tenant: rights on ConfigMirrors in its own namespace, nothing elsewhere ------------

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def grant(server: ApiServer, namespace: str, name: str, rules: list[dict[str, Any]]) -> None:
    """Bind the ``limited`` user to a Role of ``rules`` in ``namespace``; wait for RBAC."""
    role: dict[str, Any] = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role"}
    role |= {"metadata": {"name": name}, "rules": rules}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "limited"}],
    }
    for path, body in (
        (f"{RBAC}/namespaces/{namespace}/roles", role),
        (f"{RBAC}/namespaces/{namespace}/rolebindings", binding),
    ):
        answer = server.request("POST", path, body=body)
        assert answer.status == 201, answer.body[:300]
    first = rules[0]
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "limited",
            "resourceAttributes": {
                "namespace": namespace,
                "verb": first["verbs"][0],
                "group": first["apiGroups"][0],
                "resource": first["resources"][0],
                "name": first.get("resourceNames", [""])[0],
            },
        },
    }
    for _ in range(200):
        answer = server.request(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review
        )
        if answer.json().get("status", {}).get("allowed"):
            return
        time.sleep(0.05)
    raise AssertionError(f"RBAC never granted {name} in {namespace}")


class Tenant:
    """The ``limited`` user, allowed everything on ConfigMirrors (and their status) in
    ``home`` and nothing else; ``other`` is a namespace that accepts copies and carries
    ``labels``, where the tenant has no right at all."""

    def __init__(self, user: Client, home: str, other: str, labels: dict[str, str]) -> None:
        self.user = user
        self.home = home
        self.other = other
        self.labels = labels

    def annotation(self, selector: Any = None) -> dict[str, str]:
        """The conversion annotation holding ``selector`` (by default: ``other``'s labels)."""
        chosen = {"matchLabels": self.labels} if selector is None else selector
        return {SELECTOR_ANNOTATION: json.dumps(chosen)}


@pytest.fixture
async def tenant(configmirror_api: ApiServer, client: Client, home: str) -> AsyncIterator[Tenant]:
    server = configmirror_api
    other = await trio.to_thread.run_sync(lambda: server.create_namespace(prefix="cm-other"))
    labels = {"kubemoon.dev/tenant-test": other}
    await trio.to_thread.run_sync(lambda: accept_mirrors(server, other))
    await trio.to_thread.run_sync(lambda: label_namespace(server, other, dict(labels)))
    rules = [
        {
            "apiGroups": ["kubemoon.dev"],
            "resources": ["configmirrors", "configmirrors/status"],
            "verbs": ["create", "get", "list", "update", "patch"],
        }
    ]
    await trio.to_thread.run_sync(lambda: grant(server, home, "tenant-mirrors", rules))
    await client.create(
        CONFIGMAPS, {"metadata": {"name": "settings"}, "data": {"k": "secret"}}, namespace=home
    )
    try:
        async with Client.from_kubeconfig(str(server.kubeconfig_path), context="limited") as user:
            yield Tenant(user, home, other, labels)
    finally:
        await trio.to_thread.run_sync(lambda: server.delete_namespace(other))


async def stored_selector(client: Client, namespace: str, name: str) -> Any:
    """The stored (v1beta1) selector of a mirror, and the conversion annotation if kept."""
    stored = await client.get(CONFIGMIRRORS_V1BETA1, name, namespace=namespace)
    annotations = stored["metadata"].get("annotations") or {}
    return stored["spec"]["targets"].get("namespaceSelector"), annotations.get(SELECTOR_ANNOTATION)


async def test_a_v1alpha1_create_cannot_select_another_tenants_namespace(
    client: Client, served: Served, tenant: Tenant
) -> None:
    user, home = tenant.user, tenant.home
    # Attack 1: a selector naming the other namespace's labels, through the annotation.
    attack = mirror("select-other", [])
    attack["metadata"]["annotations"] = tenant.annotation()
    with pytest.raises(ApiError) as info:
        await user.create(CONFIGMIRRORS, attack, namespace=home)
    assert info.value.code == 403
    assert "user 'limited' may not create ConfigMaps in all namespaces" in str(info.value)
    # Attack 2: an empty selector, every namespace that accepts copies.
    attack["metadata"] = {"name": "select-all", "annotations": tenant.annotation({})}
    with pytest.raises(ApiError) as info:
        await user.create(CONFIGMIRRORS, attack, namespace=home)
    assert info.value.code == 422
    assert "must name at least one label in matchLabels" in str(info.value)
    # matchExpressions, which a pruning conversion turned into {}: refused as written.
    expressions = {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "Exists"}]
    }
    attack["metadata"] = {"name": "expressions", "annotations": tenant.annotation(expressions)}
    with pytest.raises(ApiError, match="matchExpressions: not in the schema"):
        await user.create(CONFIGMIRRORS, attack, namespace=home)
    # Label values of another type than string.
    for value in ([1], 1):
        bad = {"matchLabels": {"a": value}}
        attack["metadata"] = {"name": "typed", "annotations": tenant.annotation(bad)}
        with pytest.raises(ApiError, match="expected string"):
            await user.create(CONFIGMIRRORS, attack, namespace=home)
    # JSON nested deeper than the parser goes: a clean refusal, not a crashed handler.
    attack["metadata"] = {"name": "deep", "annotations": {SELECTOR_ANNOTATION: "[" * 16_000}}
    with pytest.raises(ApiError, match="nested too deeply") as info:
        await user.create(CONFIGMIRRORS, attack, namespace=home)
    assert info.value.code == 422
    # Straight in v1beta1: matchExpressions is pruned by the apiserver, leaving {}.
    beta = {
        "apiVersion": "kubemoon.dev/v1beta1",
        "kind": "ConfigMirror",
        "metadata": {"name": "beta-expressions"},
        "spec": {
            "source": "settings",
            "targets": {"namespaces": [], "namespaceSelector": expressions},
        },
    }
    with pytest.raises(ApiError, match="must name at least one label"):
        await user.create(CONFIGMIRRORS_V1BETA1, beta, namespace=home)
    # Even an admin may not store a selector the operator would read as wider.
    with pytest.raises(ApiError, match="must name at least one label"):
        await client.create(CONFIGMIRRORS_V1BETA1, beta, namespace=home)
    assert [m async for m in client.list(CONFIGMIRRORS_V1BETA1, namespace=home)] == []


async def test_no_verb_in_any_version_adds_a_selector_for_a_tenant(
    client: Client, served: Served, tenant: Tenant
) -> None:
    user, home = tenant.user, tenant.home
    # A mirror that reaches nothing needs no access review: the tenant may create it.
    await user.create(CONFIGMIRRORS, mirror("m", []), namespace=home)
    annotation = tenant.annotation()
    selector = {"matchLabels": tenant.labels}
    current = await user.get(CONFIGMIRRORS, "m", namespace=home)
    replaced = {**current, "metadata": {**current["metadata"], "annotations": annotation}}
    applied = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m", "annotations": annotation},
        "spec": {"source": "settings", "targetNamespaces": []},
    }
    attacks: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        # Attack 3: a v1alpha1 PATCH adding the annotation, in every patch format.
        (
            "merge",
            lambda: user.patch(
                CONFIGMIRRORS, "m", {"metadata": {"annotations": annotation}}, namespace=home
            ),
        ),
        (
            "json",
            lambda: user.patch(
                CONFIGMIRRORS,
                "m",
                [{"op": "add", "path": "/metadata/annotations", "value": annotation}],
                patch_type=PatchType.JSON,
                namespace=home,
            ),
        ),
        ("put", lambda: user.replace(CONFIGMIRRORS, replaced, namespace=home)),
        (
            "apply",
            lambda: user.apply(
                CONFIGMIRRORS, applied, field_manager="tenant", namespace=home, force=True
            ),
        ),
        # And the selector itself through v1beta1.
        (
            "v1beta1 merge",
            lambda: user.patch(
                CONFIGMIRRORS_V1BETA1,
                "m",
                {"spec": {"targets": {"namespaceSelector": selector}}},
                namespace=home,
            ),
        ),
    ]
    for what, attack in attacks:
        with pytest.raises(ApiError) as info:
            await attack()
        assert info.value.code == 403, what
        assert "may not create ConfigMaps in all namespaces" in str(info.value), what
    assert await stored_selector(client, home, "m") == (None, None)
    # The status subresource is outside the webhook's rules, but the apiserver keeps
    # only the status of such a write: the annotation does not get through there either.
    current = await user.get(CONFIGMIRRORS, "m", namespace=home)
    current["metadata"]["annotations"] = annotation
    current["status"] = {"observedGeneration": 1}
    await user.replace(CONFIGMIRRORS, current, namespace=home, subresource="status")
    assert await stored_selector(client, home, "m") == (None, None)


async def test_an_annotation_stored_through_v1beta1_never_becomes_a_selector(
    client: Client, nursery: trio.Nursery, tmp_path: Path, home: str, tenant: Tenant
) -> None:
    # Stored before the webhooks existed: a v1beta1 mirror carrying the annotation as a
    # plain annotation (attack 4, first half).
    legacy: dict[str, Any] = {
        "apiVersion": "kubemoon.dev/v1beta1",
        "kind": "ConfigMirror",
        "metadata": {"name": "legacy", "annotations": tenant.annotation()},
        "spec": {"source": "settings", "targets": {"namespaces": []}},
    }
    await tenant.user.create(CONFIGMIRRORS_V1BETA1, legacy, namespace=home)
    async with serving(client, nursery, tmp_path, home):
        # Now the first half is refused...
        again = {**legacy, "metadata": {**legacy["metadata"], "name": "again"}}
        with pytest.raises(ApiError, match="reserved for conversion") as info:
            await tenant.user.create(CONFIGMIRRORS_V1BETA1, again, namespace=home)
        assert info.value.code == 422
        # ...and the second, any v1alpha1 write, cannot turn the stored one into a
        # selector: the conversion refuses to read it as v1alpha1.
        with pytest.raises(ApiError, match="reserved for conversion"):
            await tenant.user.patch(
                CONFIGMIRRORS, "legacy", {"metadata": {"labels": {"x": "y"}}}, namespace=home
            )
        selector, kept = await stored_selector(client, home, "legacy")
        assert selector is None and kept is not None
        # Removing the annotation through v1beta1 mends it.
        await tenant.user.patch(
            CONFIGMIRRORS_V1BETA1,
            "legacy",
            {"metadata": {"annotations": {SELECTOR_ANNOTATION: None}}},
            namespace=home,
        )
        assert await stored_selector(client, home, "legacy") == (None, None)
        read = await tenant.user.get(CONFIGMIRRORS, "legacy", namespace=home)
        assert read["spec"] == {"source": "settings", "targetNamespaces": []}


async def test_a_tenant_cannot_mirror_a_source_they_cannot_read(
    configmirror_api: ApiServer, client: Client, served: Served, tenant: Tenant
) -> None:
    server = configmirror_api
    writable = await trio.to_thread.run_sync(lambda: server.create_namespace(prefix="cm-writable"))
    try:
        create = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]
        await trio.to_thread.run_sync(lambda: grant(server, writable, "write-copies", create))
        with pytest.raises(ApiError) as info:
            await tenant.user.create(
                CONFIGMIRRORS, mirror("leak", [writable]), namespace=tenant.home
            )
        assert info.value.code == 403
        message = str(info.value)
        assert f"user 'limited' may not get ConfigMap {tenant.home}/settings" in message
        assert repr(writable) not in message  # the target itself is allowed
        # Nor by adding a target to a mirror someone else made of that source.
        await client.create(CONFIGMIRRORS, mirror("admins", []), namespace=tenant.home)
        with pytest.raises(ApiError, match=f"may not get ConfigMap {tenant.home}/settings"):
            await tenant.user.patch(
                CONFIGMIRRORS,
                "admins",
                {"spec": {"targetNamespaces": [writable]}},
                namespace=tenant.home,
            )
        # Once the tenant may read the source, the same mirror is admitted.
        read = [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get"],
                "resourceNames": ["settings"],
            }
        ]
        await trio.to_thread.run_sync(lambda: grant(server, tenant.home, "read-source", read))
        await trio.sleep(DECISION_TTL)  # the denial is cached that long
        created = await tenant.user.create(
            CONFIGMIRRORS, mirror("leak", [writable]), namespace=tenant.home
        )
        assert created["spec"]["targetNamespaces"] == [writable]
        # Another source, which the tenant cannot read, cannot be swapped in later.
        with pytest.raises(ApiError, match=f"may not get ConfigMap {tenant.home}/other"):
            await tenant.user.patch(
                CONFIGMIRRORS, "leak", {"spec": {"source": "other"}}, namespace=tenant.home
            )
    finally:
        await trio.to_thread.run_sync(lambda: server.delete_namespace(writable))


async def test_a_user_may_only_mirror_into_namespaces_they_could_write(
    configmirror_api: ApiServer, served: Served, tenant: Tenant
) -> None:
    server = configmirror_api
    home = tenant.home
    writable = await trio.to_thread.run_sync(lambda: server.create_namespace(prefix="cm-writable"))
    try:
        read = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]
        await trio.to_thread.run_sync(lambda: grant(server, home, "read-source", read))
        create = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]
        await trio.to_thread.run_sync(lambda: grant(server, writable, "write-copies", create))
        with pytest.raises(ApiError) as info:
            await tenant.user.create(
                CONFIGMIRRORS, mirror("steal", [writable, tenant.other]), namespace=home
            )
        assert info.value.code == 403
        message = str(info.value)
        expected = f"user 'limited' may not create ConfigMaps in namespace {tenant.other!r}"
        assert expected in message
        assert repr(writable) not in message  # only the namespace it may not write to
        with pytest.raises(NotFound):
            await tenant.user.get(CONFIGMIRRORS, "steal", namespace=home)
        # Into a namespace where the user may create ConfigMaps: allowed.
        created = await tenant.user.create(CONFIGMIRRORS, mirror("ok", [writable]), namespace=home)
        assert created["spec"]["targetNamespaces"] == [writable]
        # Adding the other namespace later is reviewed just the same.
        with pytest.raises(ApiError, match=f"namespace {tenant.other!r}"):
            await tenant.user.patch(
                CONFIGMIRRORS,
                "ok",
                {"spec": {"targetNamespaces": [writable, tenant.other]}},
                namespace=home,
            )
    finally:
        await trio.to_thread.run_sync(lambda: server.delete_namespace(writable))


async def test_a_mirror_stored_before_the_webhook_finishes_deleting(
    client: Client,
    nursery: trio.Nursery,
    tmp_path: Path,
    home: str,
    start_operator: StartOperator,
) -> None:
    # Stored before the webhook existed, with a spec it refuses now (its own namespace as
    # a target), and the operator's finalizer already in place.
    old = {
        "apiVersion": "kubemoon.dev/v1beta1",
        "kind": "ConfigMirror",
        "metadata": {"name": "old", "finalizers": [FINALIZER]},
        "spec": {"source": "settings", "targets": {"namespaces": [home]}},
    }
    await client.create(CONFIGMIRRORS_V1BETA1, old, namespace=home)
    async with serving(client, nursery, tmp_path, home):
        # The webhook does refuse that spec now...
        with pytest.raises(ApiError, match="own namespace"):
            await client.patch(
                CONFIGMIRRORS_V1BETA1, "old", {"metadata": {"labels": {"a": "b"}}}, namespace=home
            )
        await client.delete(CONFIGMIRRORS_V1BETA1, "old", namespace=home)
        # ...but the operator's finalizer removal finishes the deletion.
        await start_operator(namespaces=(home,))

        async def gone() -> bool:
            try:
                await client.get(CONFIGMIRRORS_V1BETA1, "old", namespace=home)
            except NotFound:
                return True
            return False

        await eventually(gone, what="the mirror stored before the webhook to be deleted")
