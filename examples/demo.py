"""`make demo`: ConfigMirror on a locally started real kube-apiserver, start to finish.

It starts etcd and kube-apiserver (built by `make testenv`), installs the CRD, creates
the target namespaces with the label that lets them accept copies, runs the
`kubemoon-configmirror` program against them, and shows a source ConfigMap mirrored into
two namespaces, an update propagating, and a deleted copy healing. Everything is torn
down at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import yaml

from configmirror import ACCEPT_MIRRORS_LABEL, CONFIGMAPS, CONFIGMIRRORS
from kubemoon_core import GroupVersionResource, NotFound
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = ["demo-source", "team-a", "team-b"]


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


async def wait_for(check: Any, what: str, timeout: float = 30.0) -> Any:
    with trio.move_on_after(timeout):
        while True:
            result = await check()
            if result:
                return result
            await trio.sleep(0.1)
    raise SystemExit(f"demo failed: timed out waiting for {what}")


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


async def demo(server: ApiServer, log_path: Path) -> None:
    async with Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        say("installing the ConfigMirror CRD")
        crd = yaml.safe_load((ROOT / "deploy" / "crd.yaml").read_text())
        await client.create(
            GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            crd,
        )
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
                async for _ in client.list(CONFIGMIRRORS, namespace=NAMESPACES[0]):
                    pass
            except NotFound:
                return False
            return True

        await wait_for(crd_served, "the CRD to be served")

        say("starting kubemoon-configmirror")
        argv = [
            sys.executable, "-m", "configmirror", "--kubeconfig", str(server.kubeconfig_path),
            "--probe-address", "127.0.0.1:0", "--log-format", "json",
        ]  # fmt: skip
        with log_path.open("w") as log:
            process = subprocess.Popen(argv, stderr=log)
            try:
                await run_story(client)
            finally:
                process.terminate()
                code = await trio.to_thread.run_sync(process.wait)
                say(f"operator stopped on SIGTERM with exit status {code}")


async def run_story(client: Client) -> None:
    source = {
        "metadata": {"name": "app-settings"},
        "data": {"log_level": "info", "feature_x": "on"},
    }
    await client.create(CONFIGMAPS, source, namespace=NAMESPACES[0])
    mirror = {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "app-settings"},
        "spec": {"source": "app-settings", "targetNamespaces": NAMESPACES[1:]},
    }
    await client.create(CONFIGMIRRORS, mirror, namespace=NAMESPACES[0])
    say(f"created source {NAMESPACES[0]}/app-settings and a ConfigMirror to {NAMESPACES[1:]}")
    await wait_for(lambda: copies_have(client, source["data"]), "the first mirror")
    await show_copies(client)
    status = (await client.get(CONFIGMIRRORS, "app-settings", namespace=NAMESPACES[0]))["status"]
    ready = status["conditions"][0]
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
        trio.run(demo, server, Path(tmp) / "operator.log")
        say("tearing down")
    print(f"\ndemo finished in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
