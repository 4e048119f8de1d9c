"""Webhooks declared once on the Manager, registered and kept by the library, on the real
kube-apiserver: the configurations come from the declarations (the apiserver calls each
webhook), a configuration deleted by hand comes back, the certificates renew and rotate
under load with no failed admission call, two replicas share one certificate while only
the leader writes, and missing RBAC is loud.

Every configuration selects only the test's namespace (by a label) and is named after it,
so a configuration left behind by a failed test cannot affect another test.
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import logging
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from overlays import RBAC_KINDS, rendered

from kubemoon_core import ApiError, GroupVersionResource, PatchType, WriteOptions
from kubemoon_core.errors import AlreadyExists, NotFound
from kubemoon_core.webhooks import (
    AdmissionRequest,
    AdmissionResponse,
    CertificatePolicy,
    WebhookDeclarations,
)
from kubemoon_io import CertificateMaterial, pem_fingerprints
from kubemoon_testing import ApiServer, WebhookCertificates
from kubemoon_trio import Client, LeaderElectionConfig, Manager, WebhookManager

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")
NAMESPACES = GroupVersionResource("", "v1", "namespaces")
SECRETS = GroupVersionResource("", "v1", "secrets")
ADMISSION = "admissionregistration.k8s.io"
VALIDATING = GroupVersionResource(ADMISSION, "v1", "validatingwebhookconfigurations")
MUTATING = GroupVersionResource(ADMISSION, "v1", "mutatingwebhookconfigurations")
TEST_LABEL = "kubemoon.dev/webhook-manager-test"

# Seconds instead of years: the CA rotates and the serving certificate renews while the
# test runs (the apiserver judges validity on the same clock).
FAST = CertificatePolicy(
    ca_validity=30.0,
    rotate_ca_before=22.0,
    serving_validity=12.0,
    renew_before=6.0,
    propagation=2.0,
    overlap=3.0,
    backdate=5.0,
)


class Calls:
    """What the webhooks saw."""

    def __init__(self) -> None:
        self.validated = 0
        self.mutated = 0


def declarations(name: str, namespace: str, calls: Calls, *, mutating: bool = True) -> Any:
    hooks = WebhookDeclarations(name)
    selector = {"matchLabels": {TEST_LABEL: namespace}}

    @hooks.validating("/validate-cm", CM, namespace_selector=selector)
    def validate(request: AdmissionRequest) -> AdmissionResponse:
        calls.validated += 1
        if "forbidden" in ((request.object or {}).get("data") or {}):
            return AdmissionResponse.deny("the key 'forbidden' is not allowed")
        return AdmissionResponse.allow()

    if mutating:

        @hooks.mutating("/mutate-cm", CM, namespace_selector=selector)
        def mutate(request: AdmissionRequest) -> AdmissionResponse:
            calls.mutated += 1
            assert request.object is not None
            new = copy.deepcopy(dict(request.object))
            new.setdefault("metadata", {}).setdefault("labels", {})["mutated"] = "yes"
            return AdmissionResponse.patched(request.object, new)

    return hooks


@pytest.fixture
async def client(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as c:
        yield c


@pytest.fixture
async def namespace(client: Client, kube_namespace: str) -> AsyncIterator[str]:
    await client.patch(
        NAMESPACES, kube_namespace, {"metadata": {"labels": {TEST_LABEL: kube_namespace}}}
    )
    yield kube_namespace
    for resource, suffix in ((VALIDATING, "validating"), (MUTATING, "mutating")):
        for name in (f"t{kube_namespace[-8:]}-{suffix}", f"u{kube_namespace[-8:]}-{suffix}"):
            try:
                await client.delete(resource, name)
            except NotFound:
                pass


async def eventually(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 30) -> Any:
    with trio.move_on_after(timeout):
        while not (result := await check()):
            await trio.sleep(0.1)
        return result
    raise AssertionError(f"timed out waiting for {what}")


async def start(
    nursery: trio.Nursery,
    client: Client,
    hooks: WebhookDeclarations,
    namespace: str,
    **options: Any,
) -> tuple[Manager, WebhookManager]:
    election = options.pop("leader_election", None)
    manager_name = options.pop("manager_name", "kubemoon.dev/webhook-test")
    check = options.pop("check_permissions", True)
    manager = Manager(client, name=manager_name, leader_election=election, check_permissions=check)
    webhooks = manager.serve_webhooks(
        hooks,
        host="127.0.0.1",
        port=0,
        **{
            "secret": (namespace, f"{hooks.name}-certs"),
            "resync": 0.5,
            "refresh": 0.5,
            **options,
        },
    )
    await nursery.start(manager.run)
    return manager, webhooks


async def admitted(client: Client, namespace: str, name: str) -> bool:
    """A dry-run create is denied by the webhook once the apiserver has the configuration."""
    try:
        await client.create(
            CM,
            {"metadata": {"name": name}, "data": {"forbidden": "x"}},
            namespace=namespace,
            options=WriteOptions(dry_run=True),
        )
    except ApiError as exc:
        return "not allowed" in str(exc)
    return False


async def test_registers_from_declarations_and_repairs_a_deleted_configuration(
    nursery: trio.Nursery, client: Client, namespace: str
) -> None:
    calls = Calls()
    name = f"t{namespace[-8:]}"
    manager, webhooks = await start(
        nursery, client, declarations(name, namespace, calls), namespace
    )
    await eventually(lambda: admitted(client, namespace, "probe"), "the validating webhook")
    created = await client.create(
        CM, {"metadata": {"name": "ok"}, "data": {"a": "b"}}, namespace=namespace
    )
    assert created["metadata"]["labels"] == {"mutated": "yes"}  # the mutating webhook ran
    assert calls.validated >= 2 and calls.mutated >= 1
    # What the leader applied is what the declarations say, owned by the Manager's name.
    config = await client.get(VALIDATING, f"{name}-validating")
    (entry,) = config["webhooks"]
    assert entry["name"] == f"validate-cm.{name}.kubemoon.dev"
    assert entry["clientConfig"]["url"] == f"{webhooks.server.url}/validate-cm"
    assert entry["namespaceSelector"] == {"matchLabels": {TEST_LABEL: namespace}}
    managers = {f["manager"] for f in config["metadata"]["managedFields"]}
    assert managers == {"kubemoon.dev/webhook-test"}
    assert manager.readiness_problems() == []

    # Deleted by hand: the leader puts it back, and the webhook is called again.
    await client.delete(VALIDATING, f"{name}-validating")
    await eventually(lambda: _exists(client, VALIDATING, f"{name}-validating"), "the repair")
    await eventually(lambda: admitted(client, namespace, "probe2"), "the repaired webhook")

    # Pointed elsewhere by hand (or by an attacker with that right): taken back.
    await client.patch(
        VALIDATING,
        f"{name}-validating",
        [{"op": "replace", "path": "/webhooks/0/clientConfig/url", "value": "https://x:1/v"}],
        patch_type=PatchType.JSON,
    )

    async def restored() -> bool:
        config = await client.get(VALIDATING, f"{name}-validating")
        return bool(config["webhooks"][0]["clientConfig"]["url"] == entry["clientConfig"]["url"])

    await eventually(restored, "the URL to be restored")
    manager.stop()


async def _exists(client: Client, resource: GroupVersionResource, name: str) -> bool:
    try:
        await client.get(resource, name)
    except NotFound:
        return False
    return True


async def test_a_removed_declaration_removes_its_entry(
    nursery: trio.Nursery, client: Client, namespace: str
) -> None:
    name = f"t{namespace[-8:]}"
    hooks = declarations(name, namespace, Calls())

    @hooks.validating("/validate-extra", CM, namespace_selector={"matchLabels": {"x": "y"}})
    def extra(request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    first, _ = await start(nursery, client, hooks, namespace)

    async def entries() -> list[str]:
        try:
            config = await client.get(VALIDATING, f"{name}-validating")
        except NotFound:
            return []
        return sorted(w["name"] for w in config["webhooks"])

    await eventually(lambda: _has(entries, 2), "both entries")
    first.stop()
    # The next version of the operator declares the validating webhook only.
    second, _ = await start(
        nursery, client, declarations(name, namespace, Calls(), mutating=False), namespace
    )

    async def removed() -> bool:
        try:
            mutating = await client.get(MUTATING, f"{name}-mutating")
        except NotFound:
            return False
        # The validating entry stays; no mutating webhook is declared any more.
        only = [f"validate-cm.{name}.kubemoon.dev"]
        return await entries() == only and mutating.get("webhooks", []) == []

    await eventually(removed, "the removed entries to go")
    second.stop()


async def _has(entries: Callable[[], Awaitable[list[str]]], count: int) -> bool:
    return len(await entries()) == count


def _trusted_by(bundle: bytes, port: int) -> bool:
    """Whether a TLS handshake with the server at ``port`` verifies against ``bundle``."""
    context = ssl.create_default_context(cadata=bundle.decode())
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
            context.wrap_socket(sock, server_hostname="127.0.0.1"),
        ):
            return True
    except (ssl.SSLError, OSError):
        return False


def _served_certificate(port: int) -> bytes:
    """The certificate the server at ``port`` presents (PEM), without verifying it."""
    return ssl.get_server_certificate(("127.0.0.1", port)).encode()


async def test_rotation_and_renewal_under_load_with_two_replicas(
    nursery: trio.Nursery, kube_apiserver: ApiServer, client: Client, namespace: str
) -> None:
    calls = Calls()
    name = f"t{namespace[-8:]}"
    hooks = declarations(name, namespace, calls)
    election = {"name": f"{name}-lease", "namespace": namespace}
    replicas = []
    for identity in ("one", "two"):
        config = LeaderElectionConfig(
            **election,
            identity=identity,
            lease_duration=15.0,
            renew_deadline=10.0,
            retry_period=0.5,
        )
        replicas.append(
            await start(
                nursery,
                client,
                hooks,
                namespace,
                policy=FAST,
                leader_election=config,
                manager_name=f"kubemoon.dev/webhook-test-{identity}",
            )
        )
    secret_name = f"{name}-certs"
    await eventually(lambda: admitted(client, namespace, "probe"), "the webhooks")
    leaders = [m for m, _ in replicas if m.is_leader]
    assert len(leaders) == 1
    follower = next(w for m, w in replicas if not m.is_leader)
    leader = next(w for m, w in replicas if m.is_leader)
    leader_name = leaders[0].name

    async def follower_serving() -> bool:
        return follower.server.serving

    await eventually(follower_serving, "the follower to serve (once it read the Secret)")

    secret = await client.get(SECRETS, secret_name, namespace=namespace)
    first = CertificateMaterial.from_secret(secret)
    serials = {first.cert}
    cas = {first.ca_cert}
    bundles = {first.bundle}
    created = failed = untrusted = 0
    # No retry of any kind hides a failed admission call.
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path), max_retries=0) as strict:
        # 200 objects through both webhooks while the serving certificate renews (every ~6 s)
        # and the CA rotates (after ~8 s, switched ~2 s after its bundle is published, the
        # old CA dropped 3 s later).
        for index in range(200):
            try:
                made = await strict.create(
                    CM,
                    {"metadata": {"name": f"cm-{index}"}, "data": {"i": str(index)}},
                    namespace=namespace,
                )
            except ApiError as exc:
                failed += 1
                logging.getLogger("test").error("admission failed: %s", exc)
            else:
                created += 1
                assert made["metadata"]["labels"] == {"mutated": "yes"}
            material = CertificateMaterial.from_secret(
                await client.get(SECRETS, secret_name, namespace=namespace)
            )
            serials.add(material.cert)
            cas.add(material.ca_cert)
            bundles.add(material.bundle)
            # The API server calls the leader's URL; the follower, reached with the
            # caBundle the configuration holds now, is trusted as well.
            config = await client.get(VALIDATING, f"{name}-validating")
            bundle = base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])
            port = follower.server.port
            if not await trio.to_thread.run_sync(_trusted_by, bundle, port):
                untrusted += 1
            await trio.sleep(0.1)
    assert (created, failed, untrusted) == (200, 0, 0)
    assert len(serials) >= 3, "the serving certificate was never renewed"
    assert len(cas) >= 2, "the CA never rotated"
    sizes = {len(pem_fingerprints(bundle)) for bundle in bundles}
    assert sizes == {1, 2}, "no overlap of two CAs, or an old CA never dropped"
    assert calls.validated >= 200 and calls.mutated >= 200

    # Both replicas serve the certificate of the Secret (renewed every few seconds here:
    # wait for a moment when neither replica is behind).
    async def same_certificate() -> bool:
        material = CertificateMaterial.from_secret(
            await client.get(SECRETS, secret_name, namespace=namespace)
        )
        for webhooks in (leader, follower):
            served = await trio.to_thread.run_sync(_served_certificate, webhooks.server.port)
            if pem_fingerprints(served) != pem_fingerprints(material.cert):
                return False
        return True

    await eventually(same_certificate, "both replicas to serve the Secret's certificate")
    # Only the leader wrote the configurations (each replica applies under its own name).
    assert leader.applied > 0 and follower.applied == 0
    for resource, suffix in ((VALIDATING, "validating"), (MUTATING, "mutating")):
        config = await client.get(resource, f"{name}-{suffix}")
        assert {f["manager"] for f in config["metadata"]["managedFields"]} == {leader_name}
    for manager, _ in replicas:
        manager.stop()


async def test_missing_rbac_is_an_error_and_a_readiness_reason(
    nursery: trio.Nursery,
    kube_apiserver: ApiServer,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The limited user may keep the Secret but not write webhook configurations. With the
    # start-up check on, nothing is written at all (test_rbac_check_gates_writes.py); with
    # it off (a cluster forbidding access reviews) the leader's refused write is loud.
    kube_apiserver.grant_namespace_access(
        namespace, verbs=("get", "create", "update"), resources=("secrets",)
    )
    async with Client.from_kubeconfig(
        str(kube_apiserver.kubeconfig_path), context="limited"
    ) as limited:
        name = f"u{namespace[-8:]}"
        manager, _ = await start(
            nursery,
            limited,
            declarations(name, namespace, Calls()),
            namespace,
            check_permissions=False,
        )

        def forbidden() -> list[str]:
            return [p for p in manager.readiness_problems() if "forbidden" in p]

        async def reported() -> list[str]:
            return forbidden()

        problems = await eventually(reported, "a readiness reason")
        assert any("validatingwebhookconfigurations: patch forbidden" in p for p in problems)
        errors = [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.ERROR and r.name == "kubemoon.webhooks"
        ]
        assert any("validatingwebhookconfigurations: patch forbidden" in m for m in errors)
        manager.stop()


WIDGET_CRD = Path(__file__).parents[2] / "examples" / "widgets" / "crd.yaml"
WIDGET_EXAMPLE = Path(__file__).parents[2] / "examples" / "widgets" / "webhooks.py"
WIDGETS = GroupVersionResource("examples.kubemoon.dev", "v1", "widgets")
CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "examples.kubemoon.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_the_widget_example_on_the_apiserver(
    nursery: trio.Nursery, client: Client, namespace: str
) -> None:
    try:
        await client.create(CRDS, yaml.safe_load(WIDGET_CRD.read_text()))
    except AlreadyExists:
        pass  # the widgets tests share it
    spec = importlib.util.spec_from_file_location("widget_webhooks_e2e", WIDGET_EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    # The example's configurations select every namespace: remove them whatever happens.
    try:
        manager, _ = await start(nursery, client, example.hooks, namespace)

        async def defaulted() -> bool:
            try:
                made = await client.create(
                    WIDGETS,
                    widget("probe"),
                    namespace=namespace,
                    options=WriteOptions(dry_run=True),
                )
            except NotFound:
                return False  # the CRD is not served yet
            return bool(made["spec"].get("data") == {"greeting": "hello"})

        await eventually(defaulted, "the mutating webhook")
        made = await client.create(WIDGETS, widget("w1", replicas=3), namespace=namespace)
        assert made["spec"]["data"] == {"greeting": "hello"}
        kept = await client.create(WIDGETS, widget("w2", data={"a": "b"}), namespace=namespace)
        assert kept["spec"]["data"] == {"a": "b"}
        with pytest.raises(ApiError, match="a small widget has at most 10 replicas"):
            await client.create(WIDGETS, widget("w3", replicas=11), namespace=namespace)

        def served(name: str) -> float:
            value = manager.registry.get_sample_value(
                "controller_runtime_webhook_requests_total",
                {"webhook": f"{name}.widgets.kubemoon.dev", "code": "200"},
            )
            return value or 0.0

        # The API server called both webhooks of the example.
        assert served("validate-widget") >= 2 and served("default-widget") >= 3
        manager.stop()
    finally:
        for resource, suffix in ((VALIDATING, "validating"), (MUTATING, "mutating")):
            try:
                await client.delete(resource, f"widgets-{suffix}")
            except NotFound:
                pass


ADAPTER_SCRIPT = """
import importlib, sys
from kubemoon_core import GroupVersionResource
from kubemoon_core.webhooks import AdmissionResponse, WebhookDeclarations
km = importlib.import_module("kubemoon_" + sys.argv[1])
namespace, name, kubeconfig = sys.argv[2], sys.argv[3], sys.argv[4]
hooks = WebhookDeclarations(name)
selector = {"matchLabels": {sys.argv[5]: namespace}}

@hooks.validating("/validate-cm", GroupVersionResource("", "v1", "configmaps"),
                  namespace_selector=selector)
def validate(request):
    return AdmissionResponse.deny("denied by the " + sys.argv[1] + " adapter")

manager = km.Manager(km.Client.from_kubeconfig(kubeconfig), name="kubemoon.dev/" + sys.argv[1])
manager.serve_webhooks(hooks, host="127.0.0.1", port=0, secret=(namespace, name + "-certs"),
                       resync=0.5, refresh=0.5)
manager.run_forever()
"""


@pytest.mark.parametrize("adapter", ["asyncio", "sync"])
async def test_the_generated_adapters_serve_and_register(
    adapter: str, kube_apiserver: ApiServer, client: Client, namespace: str
) -> None:
    name = f"t{namespace[-8:]}"
    argv = [
        sys.executable,
        "-c",
        ADAPTER_SCRIPT,
        adapter,
        namespace,
        name,
        str(kube_apiserver.kubeconfig_path),
        TEST_LABEL,
    ]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE)
    try:

        async def denied() -> bool:
            try:
                await client.create(
                    CM,
                    {"metadata": {"name": "x"}},
                    namespace=namespace,
                    options=WriteOptions(dry_run=True),
                )
            except ApiError as exc:
                return f"denied by the {adapter} adapter" in str(exc)
            return False

        await eventually(denied, f"the {adapter} adapter's webhook")
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await trio.to_thread.run_sync(process.communicate)
    assert process.returncode == 0, err.decode()[-2000:]


RBAC_API = "/apis/rbac.authorization.k8s.io/v1"


async def test_the_deployed_rbac_is_enough(
    nursery: trio.Nursery, kube_apiserver: ApiServer, client: Client, namespace: str
) -> None:
    """The RBAC of the rendered self-managed overlay (derived from the declarations:
    deploy/overlays/self-managed/rbac.yaml), bound to a user without any other right, lets
    the manager keep its Secret and register its webhooks."""
    suffix = namespace[-8:]
    created: list[str] = []
    for doc in rendered("self-managed", RBAC_KINDS):
        kind, meta = doc["kind"], doc["metadata"]
        if kind == "ServiceAccount":
            continue  # bound to the user "limited" instead
        if "namespace" in meta:
            meta["namespace"] = namespace  # kubemoon-system, here the test's namespace
        if kind.startswith("Cluster"):
            meta["name"] = f"{meta['name']}-{suffix}"
            if kind == "ClusterRoleBinding":
                doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{suffix}"
        if "subjects" in doc:
            doc["subjects"] = [
                {"kind": "User", "name": "limited", "apiGroup": "rbac.authorization.k8s.io"}
            ]
        plural = {"Role": "roles", "RoleBinding": "rolebindings"}.get(kind)
        path = (
            f"{RBAC_API}/namespaces/{namespace}/{plural}"
            if plural
            else f"{RBAC_API}/{kind.lower()}s"
        )
        answer = kube_apiserver.request("POST", path, body=doc)
        assert answer.status == 201, answer.body[:300]
        if kind.startswith("Cluster"):
            created.append(f"{path}/{meta['name']}")
    try:
        async with Client.from_kubeconfig(
            str(kube_apiserver.kubeconfig_path), context="limited"
        ) as limited:
            # ConfigMirror's configuration and Secret names, the test's namespace only.
            hooks = declarations("configmirror", namespace, Calls())
            manager, _ = await start(
                nursery, limited, hooks, namespace, secret=(namespace, "configmirror-webhook-certs")
            )
            await eventually(lambda: admitted(client, namespace, "probe"), "the webhooks")

            async def ready() -> bool:
                return manager.readiness_problems() == []

            await eventually(ready, "no readiness problem")
            manager.stop()
    finally:
        for path in created:
            kube_apiserver.request("DELETE", path)
        for resource, name in ((VALIDATING, "validating"), (MUTATING, "mutating")):
            try:
                await client.delete(resource, f"configmirror-{name}")
            except NotFound:
                pass


async def test_a_cert_dir_is_only_reloaded(
    nursery: trio.Nursery, client: Client, namespace: str, tmp_path: Path
) -> None:
    """With ``cert_dir`` (cert-manager's mounted Secret) nothing is generated: the files are
    served, ``ca.crt`` goes into the configurations, and a replaced pair is reloaded."""
    certs = WebhookCertificates.create(tmp_path / "certs")
    name = f"t{namespace[-8:]}"
    hooks = declarations(name, namespace, Calls())
    manager, webhooks = await start(
        nursery, client, hooks, namespace, secret=None, cert_dir=certs.directory
    )
    await eventually(lambda: admitted(client, namespace, "probe"), "the webhooks")
    config = await client.get(VALIDATING, f"{name}-validating")
    bundle = config["webhooks"][0]["clientConfig"]["caBundle"]
    assert base64.b64decode(bundle) == certs.ca_bundle
    with pytest.raises(NotFound):
        await client.get(SECRETS, f"{name}-webhook-certs", namespace=namespace)
    # A rotation by the file owner: the new bundle is registered, then the files change.
    certs.rotate()
    certs.write()

    async def reloaded() -> bool:
        config = await client.get(VALIDATING, f"{name}-validating")
        current = base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])
        return current == certs.ca_bundle

    await eventually(reloaded, "the new bundle")

    async def served_new() -> bool:
        # Files are checked (at most every second) when a connection comes.
        called = await admitted(client, namespace, "probe2")
        served = await trio.to_thread.run_sync(_served_certificate, webhooks.server.port)
        return called and pem_fingerprints(served) == pem_fingerprints(certs.cert_file.read_bytes())

    await eventually(served_new, "the new certificate to be served")
    assert webhooks.server.certificate_reloads >= 1
    manager.stop()
