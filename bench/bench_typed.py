"""Typed decoding: 100,000 ConfigMirror dicts into typed objects, against pydantic v2.

The input is 100,000 dicts shaped as the apiserver returns ConfigMirrors (metadata, a spec
with three target namespaces, a status with one condition and three target states), made
by ``json.loads`` so they are plain JSON values. Three ways to read them, in this process:

- KubeMoon: ``kubemoon_core.typed.decode(ConfigMirror, d)`` with the declaration of
  ``configmirror/src/configmirror/_api.py`` (strict types, unknown fields refused,
  date-times parsed).
- pydantic v2: ``ConfigMirrorModel.model_validate(d)`` of equivalent models (camelCase
  aliases, ``extra="forbid"``, the same Literal enums, ``datetime`` fields). pydantic's
  default (lax) mode: its strict mode refuses a date-time string in Python input.
- the floor: plain dict access that reads every field a typed object holds, without any
  check (what code walking dicts does at best).

Each is timed (CPU time of the process) as the best of five runs over all the dicts, the
three taking turns, with the garbage collector off while timing; the target is KubeMoon no
slower than pydantic v2.

Then the same documents as bytes (compact JSON, as the apiserver sends them), straight to
typed objects:

- KubeMoon with msgspec: ``kubemoon_core.json_backends.decode_json(ConfigMirror, b)``
  (msgspec parses and
  checks into a generated Struct mirror, generated code builds the dataclasses);
- msgspec's own time for the same declaration: ``msgspec.json.Decoder(T).decode(b)`` into
  dataclasses of the same shape and types (fields named as the JSON, since msgspec cannot
  rename a dataclass's fields); the target is KubeMoon at most 1.2x that;
- msgspec into ``msgspec.Struct`` classes (its fastest form), for context;
- the stdlib path: ``decode_json`` with msgspec off (``json.loads`` and ``decode``).
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
from kubemoon_core._typed_json import _Mirror
from kubemoon_core.json_backends import decode_json, use_msgspec
from kubemoon_core.typed import decode

COUNT = 100_000
REPEAT = 5


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


def bytes_rows(docs: list[dict[str, Any]]) -> list[Row]:
    """Bytes to typed objects: KubeMoon with msgspec against msgspec's own decoders."""
    inputs = f"{COUNT:,} ConfigMirror documents as compact JSON bytes"
    blobs = [json.dumps(d, separators=(",", ":")).encode() for d in docs]
    try:
        import msgspec
    except ModuleNotFoundError:
        return [
            Row("typed decode from bytes: KubeMoon vs msgspec", inputs, "msgspec not installed")
        ]
    assert use_msgspec(True)
    assert decode_json(ConfigMirror, blobs[0]) == decode(ConfigMirror, docs[0])
    from _msgspec_configmirror import Mirror

    same = msgspec.json.Decoder(Mirror).decode
    structs = msgspec.json.Decoder(_Mirror().struct(ConfigMirror)).decode
    assert same(blobs[0]).status.targets[0].state == "Synced"

    def stdlib() -> object:
        use_msgspec(False)
        try:
            return [decode_json(ConfigMirror, b) for b in blobs]
        finally:
            use_msgspec(True)

    times = _race(
        {
            "kubemoon": lambda: [decode_json(ConfigMirror, b) for b in blobs],
            "dataclasses": lambda: [same(b) for b in blobs],
            "structs": lambda: [structs(b) for b in blobs],
            "stdlib": stdlib,
        }
    )
    us = {name: t / COUNT * 1e6 for name, t in times.items()}
    ratio = us["kubemoon"] / us["dataclasses"]
    return [
        Row(
            f"typed decode from bytes: KubeMoon decode_json (msgspec {msgspec.__version__}) vs "
            "msgspec into the same dataclasses",
            inputs,
            f"KubeMoon {us['kubemoon']:.2f} µs/object, msgspec {us['dataclasses']:.2f} "
            f"µs/object: {ratio:.2f}x msgspec's time",
            "≤ 1.2x msgspec's time",
            ratio <= 1.2,
        ),
        Row(
            "typed decode from bytes: msgspec into msgspec.Struct (its fastest form)",
            inputs,
            f"{us['structs']:.2f} µs/object; KubeMoon is {us['kubemoon'] / us['structs']:.2f}x",
        ),
        Row(
            "typed decode from bytes: KubeMoon stdlib path (json.loads + decode)",
            inputs,
            f"{us['stdlib']:.2f} µs/object; msgspec backend {us['stdlib'] / us['kubemoon']:.1f}x "
            "as fast",
        ),
    ]


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


def _race(runs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """The best CPU time of each run; the runs take turns, so a busy spell hits them alike.

    CPU time of this process, not wall time: the machine may be shared, and a wall clock
    would count the time other processes ran.

    As timeit does, the collector is off while timing: with 100,000 documents alive, its
    full passes would cost more than the decoding being compared.
    """
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(REPEAT):
        for name, run in runs.items():
            gc.collect()
            gc.disable()
            try:
                start = time.process_time()
                run()
                best[name] = min(best[name], time.process_time() - start)
            finally:
                gc.enable()
    return best


def rows() -> list[Row]:
    """Decode the same dicts three ways and compare."""
    docs = _documents()
    inputs = f"{COUNT:,} ConfigMirror dicts (3 targets, 1 condition)"
    sample = decode(ConfigMirror, docs[0])
    assert sample.status is not None
    assert sample.status.targets is not None
    runs: dict[str, Callable[[], object]] = {
        "kubemoon": lambda: [decode(ConfigMirror, d) for d in docs],
        "floor": lambda: [_dict_access(d) for d in docs],
    }
    try:
        model = _pydantic_model()
    except ModuleNotFoundError:
        model = None
    else:
        assert model.model_validate(docs[0]).status.targets[0].state == "Synced"
        validate = model.model_validate
        runs["pydantic"] = lambda: [validate(d) for d in docs]
    times = _race(runs)
    kubemoon, floor = times["kubemoon"], times["floor"]
    result = [
        Row(
            "typed decode: plain dict access (floor)",
            inputs,
            f"{floor / COUNT * 1e6:.2f} µs/object; KubeMoon is {kubemoon / floor:.1f}x the floor",
        )
    ]
    if model is None:
        result.append(
            Row("typed decode: KubeMoon vs pydantic v2", inputs, "pydantic not installed")
        )
        return result + bytes_rows(docs)
    pydantic = times["pydantic"]
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
    return result + bytes_rows(docs)


if __name__ == "__main__":
    for row in rows():
        print(row)
