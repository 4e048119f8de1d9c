"""Typed decoding: 100,000 ConfigMirror dicts into typed objects, against pydantic v2.

The input is 100,000 dicts shaped as the apiserver returns ConfigMirrors (metadata, a spec
with three target namespaces, a status with one condition and three target states), made
by ``json.loads`` so they are plain JSON values. Three ways to read them, in this process:

- KubeMoon: ``kubemoon_core.decode(ConfigMirror, d)`` with the declaration of
  ``configmirror/_api.py`` (strict types, unknown fields refused, date-times parsed).
- pydantic v2: ``ConfigMirrorModel.model_validate(d)`` of equivalent models (camelCase
  aliases, ``extra="forbid"``, the same Literal enums, ``datetime`` fields). pydantic's
  default (lax) mode: its strict mode refuses a date-time string in Python input.
- the floor: plain dict access that reads every field a typed object holds, without any
  check (what code walking dicts does at best).

Each is timed as the best of three runs over all the dicts, with the garbage collector
off while timing; the target is KubeMoon no
slower than pydantic v2.
"""

from __future__ import annotations

import datetime
import gc
import json
import time
from collections.abc import Callable
from typing import Any, Literal

from _table import Row

from configmirror._api import ConfigMirror
from kubemoon_core import decode

COUNT = 100_000
REPEAT = 3


def _documents() -> list[dict[str, Any]]:
    docs = []
    for i in range(COUNT):
        targets = [f"team-{(i + k) % 50}" for k in range(3)]
        docs.append(
            {
                "apiVersion": "kubemoon.dev/v1alpha1",
                "kind": "ConfigMirror",
                "metadata": {
                    "name": f"mirror-{i}",
                    "namespace": "source",
                    "uid": f"00000000-0000-0000-0000-{i:012d}",
                    "resourceVersion": str(1000 + i),
                    "generation": 2,
                    "creationTimestamp": "2026-11-30T10:00:00Z",
                    "finalizers": ["kubemoon.dev/configmirror"],
                },
                "spec": {"source": f"settings-{i}", "targetNamespaces": targets},
                "status": {
                    "observedGeneration": 2,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "Synced",
                            "message": "3 copies are up to date",
                            "lastTransitionTime": "2026-11-30T10:00:05Z",
                            "observedGeneration": 2,
                        }
                    ],
                    "targets": [{"namespace": t, "state": "Synced"} for t in targets],
                },
            }
        )
    loaded: list[dict[str, Any]] = json.loads(json.dumps(docs))
    return loaded


def _pydantic_model() -> Any:
    from pydantic import BaseModel, ConfigDict
    from pydantic.alias_generators import to_camel

    config = ConfigDict(alias_generator=to_camel, extra="forbid", populate_by_name=True)

    class Spec(BaseModel):
        model_config = config
        source: str
        target_namespaces: list[str]

    class Condition(BaseModel):
        model_config = config
        type: str
        status: Literal["True", "False", "Unknown"]
        reason: str
        message: str
        last_transition_time: datetime.datetime
        observed_generation: int | None = None

    class Target(BaseModel):
        model_config = config
        namespace: str
        state: Literal["Synced", "Conflict", "Pending"]
        message: str | None = None

    class Status(BaseModel):
        model_config = config
        observed_generation: int | None = None
        conditions: list[Condition] | None = None
        targets: list[Target] | None = None

    class Mirror(BaseModel):
        model_config = config
        api_version: str | None = None
        kind: str | None = None
        metadata: dict[str, Any] = {}
        spec: Spec
        status: Status | None = None

    return Mirror


def _dict_access(d: dict[str, Any]) -> tuple[Any, ...]:
    spec, status = d["spec"], d.get("status") or {}
    return (
        d["metadata"],
        spec["source"],
        list(spec["targetNamespaces"]),
        status.get("observedGeneration"),
        [
            (c["type"], c["status"], c["reason"], c["message"], c["lastTransitionTime"])
            for c in status.get("conditions") or ()
        ],
        [(t["namespace"], t["state"], t.get("message")) for t in status.get("targets") or ()],
    )


def _best(run: Callable[[], object]) -> float:
    # As timeit does, the collector is off while timing: with 100,000 documents alive, its
    # full passes would cost more than the decoding being compared.
    times = []
    for _ in range(REPEAT):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return min(times)


def rows() -> list[Row]:
    """Decode the same dicts three ways and compare."""
    docs = _documents()
    inputs = f"{COUNT:,} ConfigMirror dicts (3 targets, 1 condition)"
    sample = decode(ConfigMirror, docs[0])
    assert sample.status is not None
    assert sample.status.targets is not None
    kubemoon = _best(lambda: [decode(ConfigMirror, d) for d in docs])
    floor = _best(lambda: [_dict_access(d) for d in docs])
    result = [
        Row(
            "typed decode: plain dict access (floor)",
            inputs,
            f"{floor / COUNT * 1e6:.2f} µs/object; KubeMoon is {kubemoon / floor:.1f}x the floor",
        )
    ]
    try:
        model = _pydantic_model()
    except ModuleNotFoundError:
        result.append(
            Row("typed decode: KubeMoon vs pydantic v2", inputs, "pydantic not installed")
        )
        return result
    assert model.model_validate(docs[0]).status.targets[0].state == "Synced"
    validate = model.model_validate
    pydantic = _best(lambda: [validate(d) for d in docs])
    ratio = pydantic / kubemoon
    result.append(
        Row(
            "typed decode: KubeMoon decode vs pydantic v2 model_validate",
            inputs,
            f"KubeMoon {kubemoon / COUNT * 1e6:.2f} µs/object, pydantic "
            f"{pydantic / COUNT * 1e6:.2f} µs/object: KubeMoon {ratio:.2f}x as fast",
            "no slower than pydantic v2",
            ratio >= 1.0,
        )
    )
    return result


if __name__ == "__main__":
    for row in rows():
        print(row)
