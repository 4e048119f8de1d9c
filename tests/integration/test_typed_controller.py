"""A typed controller (``manager.controller(name, Widget)``) on every adapter, on the real
apiserver: the reconcile of examples/widgets/controller.py reads a ``Widget``, writes typed
``ConfigMap`` children and a typed status; scaling down deletes a typed child."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from kubemoon_core import Outcome, Reconciled
from kubemoon_core.builtin import ConfigMap
from kubemoon_core.typed import decode
from kubemoon_testing import ApiServer, running_manager, running_manager_in_thread

sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "widgets"))
from controller import reconcile as example_reconcile
from widget_api import Widget, WidgetStatus

pytestmark = pytest.mark.integration

WIDGETS = "/apis/examples.kubemoon.dev/v1/namespaces/{ns}/widgets"


def make_widget(server: ApiServer, namespace: str, replicas: int) -> None:
    body = {
        "apiVersion": "examples.kubemoon.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"replicas": replicas, "data": {"colour": "blue"}},
    }
    response = server.request("POST", WIDGETS.format(ns=namespace), body=body)
    assert response.status == 201, response.body[:300]


def scale(server: ApiServer, namespace: str, replicas: int) -> None:
    response = server.request(
        "PATCH",
        WIDGETS.format(ns=namespace) + "/w",
        body={"spec": {"replicas": replicas}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status == 200, response.body[:300]


def converged(server: ApiServer, namespace: str, replicas: int) -> bool:
    widget = decode(Widget, server.request("GET", WIDGETS.format(ns=namespace) + "/w").json())
    listed = server.request("GET", f"/api/v1/namespaces/{namespace}/configmaps").json()
    children = [decode(ConfigMap, {"kind": "ConfigMap", **item}) for item in listed["items"]]
    owned = [c for c in children if c.metadata.name.startswith("w-")]
    return (
        widget.status is not None
        and widget.status.ready_replicas == replicas
        and widget.status.observed_generation == widget.metadata.generation
        and len(owned) == replicas
        and all(c.data == {"colour": "blue"} for c in owned)
    )


@pytest.mark.parametrize("loop", ["trio", "asyncio"])
async def test_the_typed_example_reconciles_on_an_async_adapter(
    kube_apiserver: ApiServer, kube_namespace: str, loop: str
) -> None:
    km: Any = importlib.import_module(f"kubemoon_{loop}")
    make_widget(kube_apiserver, kube_namespace, 3)
    if loop == "asyncio":
        await _with_asyncio(km, kube_apiserver, kube_namespace)
        return
    await _exercise(km, kube_apiserver, kube_namespace)


async def _exercise(km: Any, server: ApiServer, namespace: str) -> None:
    async with km.Client.from_kubeconfig(str(server.kubeconfig_path)) as client:
        manager = km.Manager(client)
        builder = manager.controller("widgets", Widget, namespace=namespace)
        builder.owns(ConfigMap).complete(example_reconcile)
        async with running_manager(manager, timeout=30):
            with anyio.fail_after(30):
                while not converged(server, namespace, 3):
                    await anyio.sleep(0.1)
            scale(server, namespace, 1)
            with anyio.fail_after(30):
                while not converged(server, namespace, 1):
                    await anyio.sleep(0.1)


async def _with_asyncio(km: Any, server: ApiServer, namespace: str) -> None:
    import asyncio
    import threading

    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(_exercise(km, server, namespace))
        except BaseException as exc:  # handed to the test
            failure.append(exc)

    thread = threading.Thread(target=run, name="typed-asyncio")
    thread.start()
    await anyio.to_thread.run_sync(thread.join)
    if failure:
        raise failure[0]


def test_a_typed_blocking_controller(kube_apiserver: ApiServer, kube_namespace: str) -> None:
    import kubemoon_sync as km

    seen: list[type] = []

    def reconcile(ctx: km.ReconcileContext[Widget]) -> Outcome:
        widget = ctx.obj
        if widget is None:
            return Reconciled()
        seen.append(type(widget))
        wanted = [f"w-{i}" for i in range(widget.spec.replicas)]
        for name in wanted:
            ctx.ensure(ConfigMap(metadata={"name": name}, data=widget.spec.data))
        for child in ctx.owned(ConfigMap):
            if child.metadata.name not in wanted:
                assert ctx.delete(child)
        owned = ctx.owned(ConfigMap)
        done = len(owned) == len(wanted)
        ctx.update_status(
            WidgetStatus(
                replicas=len(owned),
                ready_replicas=len(owned),
                observed_generation=widget.metadata.generation,
                conditions=ctx.condition("Ready", done, "Scaled"),
            )
        )
        return Reconciled()

    make_widget(kube_apiserver, kube_namespace, 2)
    with km.Client.from_kubeconfig(str(kube_apiserver.kubeconfig_path)) as client:
        manager = km.Manager(client)
        manager.controller("widgets", Widget, namespace=kube_namespace).owns(ConfigMap).complete(
            reconcile
        )
        with running_manager_in_thread(manager, timeout=30):
            deadline = time.monotonic() + 30
            while not converged(kube_apiserver, kube_namespace, 2):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            scale(kube_apiserver, kube_namespace, 1)
            while not converged(kube_apiserver, kube_namespace, 1):
                assert time.monotonic() < deadline
                time.sleep(0.1)
    assert seen and set(seen) == {Widget}
