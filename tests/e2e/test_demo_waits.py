"""``make demo`` waits for what it prints (issue 31, defect 14a).

On a loaded machine the demo read a ConfigMirror's status before the operator had written
it (``KeyError: 'status'``). Its wait helper is run here against a real ConfigMirror on the
real apiserver, with no operator: while the object has no status (or a Ready condition
that is not True) it keeps waiting, and it returns once the status is written, or fails
after its timeout with a message naming what it waited for.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
from test_configmirror import Scenario, configmap, mirror

from configmirror import CONFIGMAPS, CONFIGMIRRORS
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def _demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ready(status: str, reason: str, generation: int) -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "conditions": [
            {
                "type": "Ready",
                "status": status,
                "reason": reason,
                "message": "by the test",
                "observedGeneration": generation,
                "lastTransitionTime": "2026-12-03T06:00:00Z",
            }
        ],
    }


async def test_the_demo_waits_for_a_status_and_names_it_on_timeout(
    configmirror_api: ApiServer, client: Client
) -> None:
    demo = _demo()
    s = Scenario(configmirror_api, client, targets=1)
    await client.create(CONFIGMAPS, configmap("settings", {"k": "v"}), namespace=s.home)
    created = await client.create(
        CONFIGMIRRORS, mirror("m", "settings", s.targets), namespace=s.home
    )
    assert "status" not in created  # no operator runs: nobody writes it
    expected = f"timed out after 1s waiting for ConfigMirror {s.home}/m to report Ready=True"
    with pytest.raises(demo.DemoFailed, match=expected):
        await demo.mirror_ready(client, "m", s.home, timeout=1.0)

    found: list[Any] = []

    async def wait() -> None:
        found.append(await demo.mirror_ready(client, "m", s.home, timeout=60.0))

    generation = created["metadata"]["generation"]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        for status, reason in (("False", "SourceNotFound"), ("True", "Synced")):
            await trio.sleep(0.5)  # the helper polls meanwhile; it must keep waiting
            assert found == []  # nothing Ready=True yet: still waiting
            body = await client.get(CONFIGMIRRORS, "m", namespace=s.home)
            body["status"] = _ready(status, reason, generation)
            await client.replace(CONFIGMIRRORS, body, namespace=s.home, subresource="status")
    (condition,) = found
    assert (condition["status"], condition["reason"]) == ("True", "Synced")
