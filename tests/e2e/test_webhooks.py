"""Admission and conversion webhooks called by the real kube-apiserver over TLS.

The apiserver reaches the webhook at ``https://127.0.0.1:<port>/...`` (a ``url``
clientConfig) and trusts it through the CA bundle that ``ca_bundle_patch`` injects. Every
webhook configuration selects only the test's namespace (by a label), so a configuration
left behind by a failed test cannot affect any other test.
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from prometheus_client import CollectorRegistry

from kubemoon_core import ApiError, GroupVersionResource, WriteOptions, delete_request
from kubemoon_core.errors import Invalid, NotFound
from kubemoon_core.webhooks import (
    AdmissionRequest,
    AdmissionResponse,
    Converter,
    WebhookApp,
    ca_bundle_patch,
)
from kubemoon_testing import ApiServer, WebhookCertificates
from kubemoon_trio import Client, WebhookServer

pytestmark = pytest.mark.integration

CM = GroupVersionResource("", "v1", "configmaps")
NAMESPACES = GroupVersionResource("", "v1", "namespaces")
CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
VALIDATING = GroupVersionResource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"
)
MUTATING = GroupVersionResource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"
)
TEST_LABEL = "kubemoon.dev/webhook-test"
FORBIDDEN_KEY = "forbidden"


class Hooks:
    """The webhook handlers, recording what the apiserver sent them."""

    def __init__(self) -> None:
        self.requests: list[AdmissionRequest] = []
        self.crashes = 0

    def explode(self, request: AdmissionRequest) -> AdmissionResponse:
        self.crashes += 1
        raise RuntimeError("handler bug")

    def unencodable(self, request: AdmissionRequest) -> AdmissionResponse:
        self.crashes += 1
        assert request.object is not None
        mutated = {**request.object, "when": object()}  # cannot be encoded as JSON
        return AdmissionResponse.patched(request.object, mutated)

    def validate(self, request: AdmissionRequest) -> AdmissionResponse:
        self.requests.append(request)
        data = (request.object or {}).get("data") or {}
        if FORBIDDEN_KEY in data:
            return AdmissionResponse.deny(
                f"configmap {request.name}: the key {FORBIDDEN_KEY!r} is not allowed"
            )
        return AdmissionResponse.allow()

    def mutate(self, request: AdmissionRequest) -> AdmissionResponse:
        assert request.object is not None
        mutated = json.loads(json.dumps(request.object))
        labels = mutated.setdefault("metadata", {}).setdefault("labels", {})
        # The "/" in the key is "~1" in the patch's path. ("~0" cannot be tested here:
        # no label, annotation or data key may contain "~"; Hypothesis covers it.)
        labels["kubemoon.dev/mutated"] = "true"
        return AdmissionResponse.patched(request.object, mutated)


def widget_converter(group: str) -> Converter:
    """v1 has ``spec.size``; v2 (stored) has ``spec.sizes``."""
    v1, v2 = f"{group}/v1", f"{group}/v2"
    converter = Converter()

    def up(obj: dict[str, Any]) -> dict[str, Any]:
        obj["spec"] = {"sizes": [obj.get("spec", {}).get("size", 0)]}
        return obj

    def down(obj: dict[str, Any]) -> dict[str, Any]:
        sizes = obj.get("spec", {}).get("sizes", [])
        obj["spec"] = {"size": sizes[0] if sizes else 0}
        return obj

    converter.register(v1, v2, up)
    converter.register(v2, v1, down)
    return converter


class Webhook:
    """A webhook server in the test's nursery that can be stopped and started again."""

    def __init__(
        self,
        nursery: trio.Nursery,
        certs: WebhookCertificates,
        app: WebhookApp,
        **options: Any,
    ) -> None:
        self.nursery = nursery
        self.certs = certs
        self.app = app
        self.options = options
        self.port = 0
        self.server: WebhookServer | None = None
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()

    async def start(self) -> None:
        server = WebhookServer(
            self.app,
            cert_file=self.certs.cert_file,
            key_file=self.certs.key_file,
            port=self.port,  # the same port again after a stop
            registry=CollectorRegistry(),
            reload_interval=0.0,
            **self.options,
        )
        scope = trio.CancelScope()
        stopped = trio.Event()

        async def run(task_status: trio.TaskStatus[int]) -> None:
            try:
                with scope:
                    await server.serve(task_status=task_status)
            finally:
                stopped.set()

        self.port = await self.nursery.start(run)
        self.server, self._scope, self._stopped = server, scope, stopped

    async def stop(self) -> None:
        assert self._scope is not None
        self._scope.cancel()
        await self._stopped.wait()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"


@pytest.fixture
async def client(kube_apiserver: ApiServer) -> AsyncIterator[Client]:
    async with Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as c:
        yield c


@pytest.fixture
def hooks() -> Hooks:
    return Hooks()


@pytest.fixture
async def webhook(nursery: trio.Nursery, tmp_path: Path, hooks: Hooks) -> Webhook:
    app = WebhookApp()
    app.validating("/validate", hooks.validate)
    app.mutating("/mutate", hooks.mutate)
    app.validating("/explode", hooks.explode)
    app.mutating("/unencodable", hooks.unencodable)
    hook = Webhook(nursery, WebhookCertificates.create(tmp_path / "certs"), app)
    await hook.start()
    return hook


@pytest.fixture
async def labelled_namespace(client: Client, kube_namespace: str) -> str:
    await client.patch(
        NAMESPACES, kube_namespace, {"metadata": {"labels": {TEST_LABEL: kube_namespace}}}
    )
    return kube_namespace


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30) -> None:
    with trio.move_on_after(timeout):
        while not await check():
            await trio.sleep(0.1)
        return
    raise AssertionError(f"timed out waiting for {what}")


async def install_configuration(
    client: Client,
    webhook: Webhook,
    namespace: str,
    *,
    mutating: bool = False,
    path: str | None = None,
    failure_policy: str = "Fail",
) -> dict[str, Any]:
    """Create a webhook configuration without a CA bundle, then inject the bundle."""
    resource, kind, default_path = (
        (MUTATING, "MutatingWebhookConfiguration", "/mutate")
        if mutating
        else (VALIDATING, "ValidatingWebhookConfiguration", "/validate")
    )
    path = path or default_path
    name = f"kubemoon-{namespace}"
    created = await client.create(
        resource,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": f"{path[1:]}.kubemoon.dev",
                    "clientConfig": {"url": webhook.url(path)},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["configmaps"],
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {TEST_LABEL: namespace}},
                    "failurePolicy": failure_policy,
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 5,
                }
            ],
        },
    )
    # What an operator does at start-up: read the configuration, inject the CA bundle.
    return await inject(client, created, webhook.certs.ca_bundle)


async def inject(client: Client, obj: dict[str, Any], bundle: bytes) -> dict[str, Any]:
    """Read the object again and patch its CA bundle, again if it changed meanwhile (422)."""
    resource = {
        "CustomResourceDefinition": CRDS,
        "ValidatingWebhookConfiguration": VALIDATING,
        "MutatingWebhookConfiguration": MUTATING,
    }[obj["kind"]]
    for _ in range(10):
        current = await client.get(resource, obj["metadata"]["name"])
        try:
            patched: dict[str, Any] = await client.request(ca_bundle_patch(current, bundle))
            break
        except Invalid:  # the resourceVersion test failed: a controller updated it
            await trio.sleep(0.1)
    else:
        raise AssertionError("the CA bundle could not be injected")
    encoded = base64.b64encode(bundle).decode()
    if obj["kind"] == "CustomResourceDefinition":
        assert patched["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] == encoded
    else:
        assert all(w["clientConfig"]["caBundle"] == encoded for w in patched["webhooks"])
    return patched


@pytest.fixture
async def configurations(client: Client) -> AsyncIterator[list[tuple[GroupVersionResource, str]]]:
    """Webhook configurations to delete after the test, whatever its outcome."""
    made: list[tuple[GroupVersionResource, str]] = []
    yield made
    for resource, name in made:
        await client.send(delete_request(resource, name))


async def wait_until_enforced(client: Client, namespace: str) -> None:
    """Dry-run creates of an invalid object until the apiserver calls the webhook."""

    async def denied() -> bool:
        try:
            await client.create(
                CM,
                configmap("probe", **{FORBIDDEN_KEY: "x"}),
                namespace=namespace,
                options=WriteOptions(dry_run=True),
            )
        except ApiError as exc:
            return "is not allowed" in str(exc)
        return False

    await eventually(denied, "the validating webhook to be enforced")


async def test_validating_webhook_rejects_an_invalid_object(
    client: Client, webhook: Webhook, labelled_namespace: str, configurations: list[Any]
) -> None:
    ns = labelled_namespace
    configurations.append((VALIDATING, f"kubemoon-{ns}"))
    await install_configuration(client, webhook, ns)
    await wait_until_enforced(client, ns)

    with pytest.raises(ApiError) as info:
        await client.create(CM, configmap("bad", **{FORBIDDEN_KEY: "1"}), namespace=ns)
    assert info.value.code == 403
    assert 'admission webhook "validate.kubemoon.dev" denied the request' in str(info.value)
    assert "configmap bad: the key 'forbidden' is not allowed" in str(info.value)
    with pytest.raises(NotFound):
        await client.get(CM, "bad", namespace=ns)
    good = await client.create(CM, configmap("good", ok="1"), namespace=ns)
    assert good["data"] == {"ok": "1"}


async def test_a_dry_run_create_runs_the_webhook_and_stores_nothing(
    client: Client,
    webhook: Webhook,
    hooks: Hooks,
    labelled_namespace: str,
    configurations: list[Any],
) -> None:
    ns = labelled_namespace
    configurations.append((VALIDATING, f"kubemoon-{ns}"))
    await install_configuration(client, webhook, ns)
    await wait_until_enforced(client, ns)
    hooks.requests.clear()

    answered = await client.create(
        CM, configmap("dry", ok="1"), namespace=ns, options=WriteOptions(dry_run=True)
    )
    assert answered["metadata"]["name"] == "dry"
    assert [(r.name, r.dry_run) for r in hooks.requests] == [("dry", True)]
    assert hooks.requests[0].user_info.username
    with pytest.raises(NotFound):
        await client.get(CM, "dry", namespace=ns)
    with pytest.raises(ApiError, match="is not allowed"):
        await client.create(
            CM,
            configmap("dry-bad", **{FORBIDDEN_KEY: "1"}),
            namespace=ns,
            options=WriteOptions(dry_run=True),
        )


async def test_a_mutating_webhooks_patch_is_applied(
    client: Client, webhook: Webhook, labelled_namespace: str, configurations: list[Any]
) -> None:
    ns = labelled_namespace
    configurations.append((MUTATING, f"kubemoon-{ns}"))
    await install_configuration(client, webhook, ns, mutating=True)

    async def mutated() -> bool:
        probe = await client.create(
            CM, configmap("probe"), namespace=ns, options=WriteOptions(dry_run=True)
        )
        return "kubemoon.dev/mutated" in probe["metadata"].get("labels", {})

    await eventually(mutated, "the mutating webhook to be called")
    stored = await client.create(CM, configmap("m", a="b"), namespace=ns)
    assert stored["metadata"]["labels"] == {"kubemoon.dev/mutated": "true"}
    assert (await client.get(CM, "m", namespace=ns))["metadata"]["labels"] == stored["metadata"][
        "labels"
    ]


async def test_failure_policy_fail_with_the_server_stopped(
    client: Client, webhook: Webhook, labelled_namespace: str, configurations: list[Any]
) -> None:
    ns = labelled_namespace
    configurations.append((VALIDATING, f"kubemoon-{ns}"))
    await install_configuration(client, webhook, ns)
    await wait_until_enforced(client, ns)

    await webhook.stop()
    with pytest.raises(ApiError) as info:
        await client.create(CM, configmap("while-down", ok="1"), namespace=ns)
    assert info.value.code == 500
    message = str(info.value)
    assert 'failed calling webhook "validate.kubemoon.dev"' in message
    assert "connection refused" in message
    with pytest.raises(NotFound):
        await client.get(CM, "while-down", namespace=ns)

    await webhook.start()
    created = await client.create(CM, configmap("while-up", ok="1"), namespace=ns)
    assert created["metadata"]["name"] == "while-up"


@pytest.mark.parametrize(
    ("path", "mutating"),
    [("/explode", False), ("/unencodable", True)],
    ids=["raises", "unencodable"],
)
async def test_a_failed_handler_follows_the_failure_policy(
    client: Client,
    webhook: Webhook,
    hooks: Hooks,
    labelled_namespace: str,
    configurations: list[Any],
    path: str,
    mutating: bool,
) -> None:
    """A handler that raises, or whose verdict cannot be encoded, is a failed call (HTTP
    500): ``Ignore`` admits the object, ``Fail`` rejects it -- never a plain denial."""
    ns = labelled_namespace
    resource = MUTATING if mutating else VALIDATING
    name = f"kubemoon-{ns}"
    configurations.append((resource, name))
    await install_configuration(
        client, webhook, ns, mutating=mutating, path=path, failure_policy="Ignore"
    )

    async def called_and_admitted() -> bool:
        before = hooks.crashes
        created = await client.create(
            CM, configmap("ignored", ok="1"), namespace=ns, options=WriteOptions(dry_run=True)
        )
        return hooks.crashes > before and created["metadata"]["name"] == "ignored"

    await eventually(called_and_admitted, "the webhook to be called under Ignore")
    created = await client.create(CM, configmap("admitted", ok="1"), namespace=ns)
    assert "kubemoon.dev/mutated" not in (created["metadata"].get("labels") or {})

    current = await client.get(resource, name)
    current["webhooks"][0]["failurePolicy"] = "Fail"
    await client.replace(resource, current)

    async def rejected() -> bool:
        try:
            await client.create(
                CM, configmap("probe", ok="1"), namespace=ns, options=WriteOptions(dry_run=True)
            )
        except ApiError as exc:
            return exc.code == 500
        return False

    await eventually(rejected, "the Fail policy to apply")
    with pytest.raises(ApiError) as info:
        await client.create(CM, configmap("refused", ok="1"), namespace=ns)
    assert info.value.code == 500
    message = str(info.value)
    assert f'failed calling webhook "{path[1:]}.kubemoon.dev"' in message
    assert "denied the request" not in message
    with pytest.raises(NotFound):
        await client.get(CM, "refused", namespace=ns)


async def test_mutual_tls_admits_the_apiserver_and_refuses_strangers(
    client: Client,
    kube_apiserver: ApiServer,
    nursery: trio.Nursery,
    tmp_path: Path,
    hooks: Hooks,
    labelled_namespace: str,
    configurations: list[Any],
) -> None:
    app = WebhookApp()
    app.validating("/validate", hooks.validate)
    webhook = Webhook(
        nursery,
        WebhookCertificates.create(tmp_path / "certs"),
        app,
        client_ca_file=kube_apiserver.ca_file,
    )
    await webhook.start()
    ns = labelled_namespace
    configurations.append((VALIDATING, f"kubemoon-{ns}"))
    await install_configuration(client, webhook, ns)
    # The apiserver presents its webhook client certificate: its calls are answered.
    await wait_until_enforced(client, ns)
    with pytest.raises(ApiError, match="is not allowed"):
        await client.create(CM, configmap("bad", **{FORBIDDEN_KEY: "1"}), namespace=ns)
    created = await client.create(CM, configmap("good", ok="1"), namespace=ns)
    assert created["metadata"]["name"] == "good"
    calls = len(hooks.requests)

    def anonymous() -> str:
        context = ssl.create_default_context(cadata=webhook.certs.ca_bundle.decode("ascii"))
        try:
            with (
                socket.create_connection(("127.0.0.1", webhook.port), timeout=10) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                tls.sendall(
                    b"POST /validate HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
                )
                return tls.recv(4096).decode("latin-1").split("\r\n", 1)[0] or "closed"
        except (ssl.SSLError, ConnectionError) as exc:
            return f"refused: {exc}"

    # Without a client certificate an admission route answers 403 and runs no handler.
    outcome = await trio.to_thread.run_sync(anonymous)
    assert outcome == "HTTP/1.1 403 ", outcome
    assert len(hooks.requests) == calls  # the stranger reached no handler


async def test_certificate_rotation_causes_no_failed_admission(
    client: Client, webhook: Webhook, labelled_namespace: str, configurations: list[Any]
) -> None:
    ns = labelled_namespace
    configurations.append((VALIDATING, f"kubemoon-{ns}"))
    configuration = await install_configuration(client, webhook, ns)
    await wait_until_enforced(client, ns)

    failures: list[BaseException] = []
    done = trio.Event()
    created = 0

    async def creates(worker: int) -> None:
        nonlocal created
        index = 0
        while not done.is_set():
            index += 1
            try:
                await client.create(CM, configmap(f"w{worker}-{index}", ok="1"), namespace=ns)
                created += 1
            except ApiError as exc:
                failures.append(exc)

    async with trio.open_nursery() as nursery:
        for worker in range(4):
            nursery.start_soon(creates, worker)
        await trio.sleep(0.5)
        # Rotation as an operator does it: trust old and new CA, then swap the files.
        webhook.certs.rotate()
        await inject(client, configuration, webhook.certs.ca_bundle)
        await trio.sleep(2.0)  # the apiserver's webhook informer picks up the new bundle
        webhook.certs.write()
        await trio.sleep(3.0)
        done.set()
    assert failures == []
    assert created > 20
    # The server reloaded the files and the apiserver's connections moved to the new
    # certificate (each kept-alive connection is closed after its next answer).
    assert webhook.server is not None
    assert webhook.server.certificate_reloads >= 1
    # Only the new CA in the bundle: admissions still work, so the new certificate is used.
    webhook.certs.forget_previous()
    await inject(client, configuration, webhook.certs.ca_bundle)
    await trio.sleep(2.0)
    await client.create(CM, configmap("after-rotation", ok="1"), namespace=ns)


async def test_crd_conversion_webhook(
    client: Client, nursery: trio.Nursery, tmp_path: Path, kube_namespace: str
) -> None:
    group = f"conv{secrets.token_hex(3)}.kubemoon.dev"
    app = WebhookApp()
    app.conversion("/convert", widget_converter(group))
    hook = Webhook(nursery, WebhookCertificates.create(tmp_path / "certs"), app)
    await hook.start()

    def schema(spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": spec}},
            }
        }

    crd = await client.create(
        CRDS,
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{group}"},
            "spec": {
                "group": group,
                "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": False,
                        "schema": schema({"size": {"type": "integer"}}),
                    },
                    {
                        "name": "v2",
                        "served": True,
                        "storage": True,
                        "schema": schema(
                            {"sizes": {"type": "array", "items": {"type": "integer"}}}
                        ),
                    },
                ],
                "conversion": {
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": ["v1"],
                        "clientConfig": {"url": hook.url("/convert")},
                    },
                },
            },
        },
    )
    try:
        await inject(client, crd, hook.certs.ca_bundle)
        v1 = GroupVersionResource(group, "v1", "widgets")
        v2 = GroupVersionResource(group, "v2", "widgets")
        body = {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": 3},
        }

        async def created() -> bool:
            try:
                await client.create(v1, body, namespace=kube_namespace)
            except ApiError as exc:
                # Not served yet, or the CA bundle not yet picked up by the apiserver.
                if exc.code not in (404, 500):
                    raise
                return False
            return True

        await eventually(created, "a v1 widget to be created through the conversion webhook")
        as_v2 = await client.get(v2, "w", namespace=kube_namespace)
        assert as_v2["apiVersion"] == f"{group}/v2"
        assert as_v2["spec"] == {"sizes": [3]}
        as_v1 = await client.get(v1, "w", namespace=kube_namespace)
        assert as_v1["apiVersion"] == f"{group}/v1"
        assert as_v1["spec"] == {"size": 3}
        assert as_v1["metadata"]["uid"] == as_v2["metadata"]["uid"]
        # A list in v1 converts every stored object in one review.
        await client.create(
            v2,
            {
                "apiVersion": f"{group}/v2",
                "kind": "Widget",
                "metadata": {"name": "w2"},
                "spec": {"sizes": [5, 6]},
            },
            namespace=kube_namespace,
        )
        listed = [item async for item in client.list(v1, namespace=kube_namespace)]
        assert sorted((i["metadata"]["name"], i["spec"]["size"]) for i in listed) == [
            ("w", 3),
            ("w2", 5),
        ]
    finally:
        await client.send(delete_request(CRDS, f"widgets.{group}"))
