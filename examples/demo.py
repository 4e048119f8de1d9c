"""`make demo`: ConfigMirror on a locally started real kube-apiserver, start to finish.

It starts etcd and kube-apiserver (built by `make testenv`), installs the CRD (v1beta1
stored, v1alpha1 served, converted by the operator's webhook), creates the target
namespaces with the label that lets them accept copies, runs the `kubemoon-configmirror`
program with self-managed webhooks against them (it makes its own certificate and
registers the webhooks and the CRD's conversion with the API server), and shows an
invalid mirror refused by the validating webhook, a valid one read in both versions, a
source ConfigMap mirrored into two namespaces, an update propagating, and a deleted copy
healing. Everything is torn
down at the end.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio
import yaml

from configmirror import (
    ACCEPT_MIRRORS_LABEL,
    CONFIGMAPS,
    CONFIGMIRRORS,
    CONFIGMIRRORS_V1BETA1,
)
from kubemoon_core import ApiError, GroupVersionResource, WriteOptions
from kubemoon_core.errors import NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = ["demo-source", "team-a", "team-b"]
CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
SECRETS = GroupVersionResource("", "v1", "secrets")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


# How long the demo waits for the operator, the webhooks or the API server to show
# something it prints (a loaded machine is slow; nothing here takes long on an idle one).
WAIT_SECONDS = 60.0


class DemoFailed(Exception):
    """What the demo waited for never came, or the API server answered something else."""


async def wait_for(check: Any, what: str, timeout: float = WAIT_SECONDS) -> Any:
    """Poll ``check`` until it returns something truthy, and return that; after ``timeout``
    seconds a :class:`DemoFailed` names ``what`` it waited for."""
    with trio.move_on_after(timeout):
        while True:
            result = await check()
            if result:
                return result
            await trio.sleep(0.1)
    raise DemoFailed(f"timed out after {timeout:g}s waiting for {what}")


def ready_condition(mirror: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Ready condition the operator wrote in ``mirror``'s status for its current
    generation, or None: no status yet (the operator writes it after the copies), no Ready
    condition, or one about an older generation."""
    status = mirror.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    generation = (mirror.get("metadata") or {}).get("generation")
    for condition in conditions if isinstance(conditions, list) else ():
        if not isinstance(condition, Mapping) or condition.get("type") != "Ready":
            continue
        if condition.get("observedGeneration") == generation:
            return condition
    return None


async def mirror_ready(
    client: Client, name: str, namespace: str, timeout: float = WAIT_SECONDS
) -> Mapping[str, Any]:
    """Wait until ConfigMirror ``namespace/name`` reports Ready=True in its status; return
    that condition."""

    async def check() -> Mapping[str, Any] | None:
        mirror = await client.get(CONFIGMIRRORS, name, namespace=namespace)
        condition = ready_condition(mirror)
        return condition if condition is not None and condition.get("status") == "True" else None

    what = f"ConfigMirror {namespace}/{name} to report Ready=True in its status"
    result: Mapping[str, Any] = await wait_for(check, what, timeout)
    return result


async def show_copies(client: Client) -> None:
    for namespace in NAMESPACES[1:]:
        try:
            copy = await client.get(CONFIGMAPS, "app-settings", namespace=namespace)
        except NotFound:
            print(f"   {namespace}/app-settings: (none)")
            continue
        owner = copy["metadata"]["annotations"]["kubemoon.dev/owner-uid"]
        print(f"   {namespace}/app-settings data={json.dumps(copy['data'])} owner-uid={owner}")


async def copies_have(client: Client, data: dict[str, str]) -> bool:
    for namespace in NAMESPACES[1:]:
        try:
            copy = await client.get(CONFIGMAPS, "app-settings", namespace=namespace)
        except NotFound:
            return False
        if copy.get("data") != data:
            return False
    return True


async def demo(server: ApiServer, tmp: Path) -> None:
    port = free_port()
    base = f"https://127.0.0.1:{port}"
    async with Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        say("installing the ConfigMirror CRD (v1beta1 stored, v1alpha1 served)")
        # The operator's leader points spec.conversion at itself once it runs.
        crd = yaml.safe_load((ROOT / "deploy" / "base" / "crd.yaml").read_text())
        await client.create(CRDS, crd)
        for namespace in NAMESPACES:
            # Targets opt in to receiving copies with a label; the source namespace does not.
            labels = {ACCEPT_MIRRORS_LABEL: "true"} if namespace != NAMESPACES[0] else {}
            await client.create(
                GroupVersionResource("", "v1", "namespaces"),
                {"metadata": {"name": namespace, "labels": labels}},
            )
        print(f"   labelled {', '.join(NAMESPACES[1:])} {ACCEPT_MIRRORS_LABEL}=true")

        async def crd_served() -> bool:
            try:
                async for _ in client.list(CONFIGMIRRORS_V1BETA1, namespace=NAMESPACES[0]):
                    pass
            except NotFound:
                return False
            return True

        await wait_for(crd_served, "the CRD to be served")

        say(f"starting kubemoon-configmirror, its self-managed webhooks on {base}")
        argv = [
            sys.executable, "-m", "configmirror", "--kubeconfig", str(server.kubeconfig_path),
            "--probe-address", "127.0.0.1:0", "--log-format", "json",
            "--webhook-host", "127.0.0.1", "--webhook-port", str(port),
            "--webhook-self-managed", "--webhook-secret", f"{NAMESPACES[0]}/webhook-certs",
        ]  # fmt: skip
        with (tmp / "operator.log").open("w") as log:
            process = subprocess.Popen(argv, stderr=log)
            try:
                await show_validation(client)
                await show_registration(client, base)
                await run_story(client)
            finally:
                process.terminate()
                code = await trio.to_thread.run_sync(process.wait)
                say(f"operator stopped on SIGTERM with exit status {code}")


async def show_registration(client: Client, base: str) -> None:
    async def secret_written() -> Mapping[str, Any] | None:
        try:
            secret = await client.get(SECRETS, "webhook-certs", namespace=NAMESPACES[0])
        except NotFound:
            return None
        data = secret.get("data")
        return data if isinstance(data, Mapping) and data else None

    where = f"{NAMESPACES[0]}/webhook-certs"
    data = await wait_for(secret_written, f"the operator to write its certificate Secret {where}")
    print(f"   certificate Secret {where}: {', '.join(sorted(data))}")

    async def conversion_registered() -> str | None:
        crd = await client.get(CRDS, "configmirrors.kubemoon.dev")
        webhook = ((crd.get("spec") or {}).get("conversion") or {}).get("webhook") or {}
        url = (webhook.get("clientConfig") or {}).get("url")
        return url if isinstance(url, str) and url.startswith(base) else None

    url = await wait_for(
        conversion_registered, f"the operator to point the CRD's conversion webhook at {base}"
    )
    print(f"   registered by the operator: the CRD converts at {url}")

    async def converts() -> bool:
        try:  # a v1alpha1 create is converted to the stored v1beta1
            await client.create(
                CONFIGMIRRORS,
                alpha_mirror([NAMESPACES[1]]),
                namespace=NAMESPACES[0],
                options=WriteOptions(dry_run=True),
            )
        except ApiError:
            return False
        return True

    await wait_for(converts, "the API server to convert ConfigMirrors through the operator")


def alpha_mirror(targets: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "app-settings"},
        "spec": {"source": "app-settings", "targetNamespaces": targets},
    }


async def show_validation(client: Client) -> None:
    say("creating an invalid ConfigMirror (its own namespace as a target)")
    invalid = alpha_mirror([NAMESPACES[1], NAMESPACES[0]])

    async def refused() -> str | None:
        try:  # a dry run until the apiserver's webhook informer has the configuration
            await client.create(
                CONFIGMIRRORS, invalid, namespace=NAMESPACES[0], options=WriteOptions(dry_run=True)
            )
        except ApiError as exc:
            return str(exc) if "denied the request" in str(exc) else None
        return None

    await wait_for(refused, "the validating webhook to be called")
    try:
        await client.create(CONFIGMIRRORS, invalid, namespace=NAMESPACES[0])
    except ApiError as exc:
        print(f"   refused ({exc.code}): {exc}")
    else:
        raise DemoFailed("the invalid ConfigMirror was admitted")


async def run_story(client: Client) -> None:
    source = {
        "metadata": {"name": "app-settings"},
        "data": {"log_level": "info", "feature_x": "on"},
    }
    await client.create(CONFIGMAPS, source, namespace=NAMESPACES[0])
    # Written as v1alpha1, targets unsorted: the mutating webhook sorts them.
    mirror = alpha_mirror(NAMESPACES[:0:-1])
    await client.create(CONFIGMIRRORS, mirror, namespace=NAMESPACES[0])
    say(f"created source {NAMESPACES[0]}/app-settings and a v1alpha1 ConfigMirror")
    for resource in (CONFIGMIRRORS, CONFIGMIRRORS_V1BETA1):
        read = await client.get(resource, "app-settings", namespace=NAMESPACES[0])
        meta = read["metadata"]
        print(
            f"   as {read['apiVersion']}: spec={json.dumps(read['spec'])} "
            f"labels={json.dumps(meta.get('labels'))} resourceVersion={meta['resourceVersion']}"
        )
    await wait_for(lambda: copies_have(client, source["data"]), "the first mirror")
    await show_copies(client)
    ready = await mirror_ready(client, "app-settings", NAMESPACES[0])
    print(f"   Ready={ready['status']} reason={ready['reason']} message={ready['message']!r}")

    say("updating the source: log_level=debug")
    current = await client.get(CONFIGMAPS, "app-settings", namespace=NAMESPACES[0])
    current["data"]["log_level"] = "debug"
    await client.replace(CONFIGMAPS, current, namespace=NAMESPACES[0])
    started = time.monotonic()
    await wait_for(lambda: copies_have(client, current["data"]), "the update to propagate")
    print(f"   propagated in {time.monotonic() - started:.2f}s")
    await show_copies(client)

    say(f"deleting the copy in {NAMESPACES[2]}")
    await client.delete(CONFIGMAPS, "app-settings", namespace=NAMESPACES[2])
    started = time.monotonic()
    await wait_for(lambda: copies_have(client, current["data"]), "the deleted copy to heal")
    print(f"   healed in {time.monotonic() - started:.2f}s")
    await show_copies(client)


def main() -> int:
    started = time.monotonic()
    say("starting etcd and kube-apiserver on 127.0.0.1")
    # The demo needs no controllers, and `make demo` builds only kube-apiserver and etcd.
    with ApiServer(controller_manager=False) as server, tempfile.TemporaryDirectory() as tmp:
        print(f"   {server.url} ready in {time.monotonic() - started:.1f}s")
        try:
            trio.run(demo, server, Path(tmp))
        except DemoFailed as exc:
            print(f"\ndemo failed: {exc}", file=sys.stderr)
            return 1
        say("tearing down")
    print(f"\ndemo finished in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
