"""Memory per cached object: a full store and a metadata-only store, against plain dicts.

100,000 ConfigMaps as the API server lists them (pages of 500, items without
apiVersion/kind, a continue token on every page but the last). Each object carries what a
real one does: name, namespace, uid, resourceVersion, creationTimestamp, two labels, one
``managedFields`` entry (the server adds one per writer) and ``data`` of four keys (about
750 bytes of JSON per object in all).

- **Full**: a ``Reflector`` fed the ``ConfigMapList`` pages, against a plain dict of the
  same items (``json.loads`` of each page, kept by (namespace, name)).
- **Metadata-only**: a ``Reflector(metadata_only=True)`` fed the same objects as the
  server answers an ``Accept: ...;as=PartialObjectMetadataList`` LIST (each item
  ``{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": ...}``,
  no ``data``), against a plain dict of those items.

- **Compact**: the same reflectors over a ``Store(compact=True)`` (each object kept as its
  JSON bytes, decoded on every read), full and metadata-only, with and without
  ``managedFields`` (a transform dropping them), each against a plain dict of the very
  objects it holds (for the rows without managedFields: the decoded items with
  ``managedFields`` dropped). Target: at most 0.5x the plain dict.

Memory is what stays allocated once the sync is done (tracemalloc, after a full
collection), divided by the number of objects; the pages are built before tracing, so
they are in no figure. No apiserver is needed: the pure machines are fed the pages, as
``bench_reflector.py`` does. Target: each store holds at most 1.3x its plain dict. Also
shown: a metadata-only store whose ``Store(transform=...)`` drops ``managedFields`` (in
these objects the managed-fields entry is most of the metadata).
"""

from __future__ import annotations

import gc
import json
import random
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _table import Row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubemoon_core import GroupVersionResource, Response
from kubemoon_core._reflector import Reflector
from kubemoon_core.lowlevel import Store

OBJECTS = 100_000
PAGE = 500
CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
TARGET = 1.3
COMPACT_TARGET = 0.5


def metadata(i: int) -> dict[str, Any]:
    return {
        "name": f"settings-{i:06d}",
        "namespace": f"team-{i % 50:02d}",
        "uid": f"6f1c2a0e-8f1b-4c1e-9a55-{i:012d}",
        "resourceVersion": str(1_000_000 + i),
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "labels": {"app.kubernetes.io/name": "demo", "tier": "backend"},
        "managedFields": [
            {
                "manager": "configmirror",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2025-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:data": {f"f:key-{j}": {} for j in range(4)},
                    "f:metadata": {"f:labels": {"f:app.kubernetes.io/name": {}, "f:tier": {}}},
                },
            }
        ],
    }


def pages(count: int, metadata_only: bool) -> list[Response]:
    """The LIST pages, full ConfigMaps or PartialObjectMetadata."""
    out = []
    for start in range(0, count, PAGE):
        items: list[dict[str, Any]] = []
        for i in range(start, min(start + PAGE, count)):
            if metadata_only:
                items.append(
                    {
                        "apiVersion": "meta.k8s.io/v1",
                        "kind": "PartialObjectMetadata",
                        "metadata": metadata(i),
                    }
                )
            else:
                items.append(
                    {
                        "metadata": metadata(i),
                        "data": {f"key-{j}": f"value {i} {j} " + "x" * 60 for j in range(4)},
                    }
                )
        list_meta: dict[str, str] = {"resourceVersion": "5000000"}
        if start + PAGE < count:
            list_meta["continue"] = f"token-{start + PAGE}"
        kind = "PartialObjectMetadataList" if metadata_only else "ConfigMapList"
        api_version = "meta.k8s.io/v1" if metadata_only else "v1"
        body = {"kind": kind, "apiVersion": api_version, "metadata": list_meta, "items": items}
        out.append(
            Response(200, (("Content-Type", "application/json"),), json.dumps(body).encode())
        )
    return out


def hold_in_dict(pages: list[Response], *, lean: bool = False) -> dict[tuple[str, str], Any]:
    held: dict[tuple[str, str], Any] = {}
    for page in pages:
        for item in json.loads(page.body)["items"]:
            meta = item["metadata"]
            if lean:
                meta.pop("managedFields", None)
            held[(meta["namespace"], meta["name"])] = item
    return held


def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A store transform: the object without ``metadata.managedFields``."""
    obj["metadata"].pop("managedFields", None)
    return obj


def reflector_sync(
    pages: list[Response], metadata_only: bool, *, transform: Any = None, compact: bool = False
) -> Reflector:
    reflector = Reflector(
        CONFIGMAPS,
        rng=random.Random(0),
        metadata_only=metadata_only,
        store=Store(transform=transform, compact=compact),
    )
    for page in pages:
        request = reflector.next_request(0.0)
        assert request is not None
        assert not request.stream
        if metadata_only:
            assert "PartialObjectMetadataList" in (request.header("Accept") or "")
        reflector.receive_response(page, 0.0)
    assert len(reflector.store) == OBJECTS
    assert reflector.has_synced
    return reflector


def retained(build: Callable[[], object]) -> int:
    """Bytes still allocated after ``build()`` returns (its result kept alive)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del kept
    gc.collect()
    return size


def rows() -> list[Row]:
    """Measure and return the table rows."""
    full_pages = pages(OBJECTS, metadata_only=False)
    meta_pages = pages(OBJECTS, metadata_only=True)
    full_json = sum(len(p.body) for p in full_pages) / OBJECTS
    meta_json = sum(len(p.body) for p in meta_pages) / OBJECTS
    sizes = {
        "dict-full": retained(lambda: hold_in_dict(full_pages)),
        "store-full": retained(lambda: reflector_sync(full_pages, False)),
        "dict-meta": retained(lambda: hold_in_dict(meta_pages)),
        "store-meta": retained(lambda: reflector_sync(meta_pages, True)),
        "store-meta-lean": retained(
            lambda: reflector_sync(meta_pages, True, transform=drop_managed_fields)
        ),
        "dict-full-lean": retained(lambda: hold_in_dict(full_pages, lean=True)),
        "dict-meta-lean": retained(lambda: hold_in_dict(meta_pages, lean=True)),
        "compact-full": retained(lambda: reflector_sync(full_pages, False, compact=True)),
        "compact-full-lean": retained(
            lambda: reflector_sync(full_pages, False, transform=drop_managed_fields, compact=True)
        ),
        "compact-meta": retained(lambda: reflector_sync(meta_pages, True, compact=True)),
        "compact-meta-lean": retained(
            lambda: reflector_sync(meta_pages, True, transform=drop_managed_fields, compact=True)
        ),
    }
    per = {name: size / OBJECTS for name, size in sizes.items()}
    inputs = f"{OBJECTS:,} ConfigMaps, pages of {PAGE}, tracemalloc after the sync"
    out = []
    for label, store, held, size in (
        ("full", "store-full", "dict-full", full_json),
        ("metadata-only", "store-meta", "dict-meta", meta_json),
    ):
        ratio = per[store] / per[held]
        out.append(
            Row(
                f"memory per cached object: {label} store vs plain dict",
                inputs + f", {size:.0f} B of JSON per item",
                f"{per[store]:,.0f} B/object vs {per[held]:,.0f} B/object: {ratio:.3f}x",
                f"≤ {TARGET}x",
                ratio <= TARGET,
            )
        )
    out.append(
        Row(
            "memory per cached object: metadata-only vs full store",
            inputs,
            f"{per['store-meta']:,.0f} vs {per['store-full']:,.0f} B/object: "
            f"{per['store-meta'] / per['store-full']:.3f}x "
            f"({sizes['store-meta'] / 2**20:.0f} vs {sizes['store-full'] / 2**20:.0f} MiB)",
        )
    )
    out.append(
        Row(
            "memory per cached object: metadata-only store without managedFields",
            inputs + ", Store(transform=...) dropping metadata.managedFields",
            f"{per['store-meta-lean']:,.0f} B/object: "
            f"{per['store-meta-lean'] / per['store-full']:.3f}x the full store "
            f"({sizes['store-meta-lean'] / 2**20:.0f} MiB)",
        )
    )
    codec = Store(compact=True)._codec
    assert codec is not None
    for label, store, held in (
        ("full", "compact-full", "dict-full"),
        ("full without managedFields", "compact-full-lean", "dict-full-lean"),
        ("metadata-only", "compact-meta", "dict-meta"),
        ("metadata-only without managedFields", "compact-meta-lean", "dict-meta-lean"),
    ):
        ratio = per[store] / per[held]
        out.append(
            Row(
                f"memory per cached object: compact {label} store vs plain dict",
                inputs + f", Store(compact=True), {codec.name} codec; the dict holds the "
                "same objects",
                f"{per[store]:,.0f} B/object vs {per[held]:,.0f} B/object: {ratio:.3f}x",
                f"≤ {COMPACT_TARGET}x",
                ratio <= COMPACT_TARGET,
            )
        )
    return out


if __name__ == "__main__":
    from _table import render

    print(render(rows(), "bench_memory alone"))
