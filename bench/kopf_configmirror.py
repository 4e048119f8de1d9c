"""The ConfigMirror operator written with kopf, for the operator benchmark.

Run it as ``kopf run bench/kopf_configmirror.py --standalone -n NS ...`` with ``KUBECONFIG``
naming the identity to use. It implements the behaviour of ``configmirror`` (the KubeMoon
operator) the way a kopf user would: kopf handlers, kopf's finalizer, in-memory indices
instead of API reads, and ``kubernetes_asyncio`` (whose credentials kopf itself can use)
for the writes.

Behaviour:

- A ConfigMirror's source ConfigMap is copied into each target namespace; every copy is
  labelled ``app.kubernetes.io/managed-by`` and annotated ``kubemoon.dev/owner-uid`` with
  the mirror's UID. Only copies carrying that UID are ever modified or deleted, and every
  update and delete is conditional on the resourceVersion (and UID) the decision was made
  from.
- A same-named ConfigMap that is not this mirror's copy is left untouched: Ready=False,
  reason TargetConflict. A missing source: Ready=False, reason SourceNotFound.
- A namespace removed from ``spec.targets.namespaces`` loses its copy; deleting the mirror
  deletes every copy before kopf removes its finalizer.
- ConfigMaps are watched too: a changed or deleted source, copy or conflicting ConfigMap
  reconciles the mirrors it concerns.
- Status is written only when it changes.

Two paths reconcile a mirror: kopf's create/update/resume handlers (status goes through
kopf's ``patch``) and the ConfigMap event handler (status is a merge patch conditional on
the mirror's resourceVersion). A per-mirror lock keeps them from interleaving. A write that
meets a 409, or a 404 on a replace, means the indices were behind: the reconcile is
retried shortly with fresh indices.

Deviations from kopf's defaults, both to compare like with like: routine handler
successes are not posted as Kubernetes Events (``configmirror`` posts none either), and
kopf's bookkeeping annotations use the ``kubemoon.dev`` prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "kubemoon.dev", "v1beta1", "configmirrors"
FINALIZER = "kubemoon.dev/kopf-cleanup"


def _targets(spec: Any) -> list[str]:
    """The explicit target namespaces of a v1beta1 spec."""
    return list((spec.get("targets") or {}).get("namespaces") or ())


OWNER_UID_ANNOTATION = "kubemoon.dev/owner-uid"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "kopf-configmirror"
RETRIES = 6

Obj = Mapping[str, Any]
Key = tuple[str, str]  # (namespace, name)

_locks: dict[str, asyncio.Lock] = {}


class Stale(Exception):
    """A write met a newer state than the indices showed: look again shortly."""


# -- startup -------------------------------------------------------------------------------


@kopf.on.login()
async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Log in through kubernetes_asyncio explicitly: with the sync ``kubernetes`` package
    also installed (bench_watch needs it), kopf's default would import that client."""
    return await kopf.login_via_async_client(**kwargs)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Tune kopf's persistence and event posting; open the API client for the writes."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubemoon.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kubemoon.dev", key="kopf-last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    await k8s_config.load_kube_config()  # KUBECONFIG and its current context, as kopf's own
    memo.api = k8s.ApiClient()


@kopf.on.cleanup()
async def close_client(memo: kopf.Memo, **_: Any) -> None:
    """Close the API client."""
    await memo.api.close()


# -- indices: the operator's cache ---------------------------------------------------------


def _snapshot(body: Obj) -> dict[str, Any]:
    # A copy (the body is a live view), without managedFields (never read, often large).
    fields = ("metadata", "spec", "status", "data", "binaryData")
    snapshot = copy.deepcopy({k: body[k] for k in fields if k in body})
    snapshot["metadata"].pop("managedFields", None)
    return snapshot


@kopf.index("configmaps")
async def configmaps(
    *, namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, dict[str, Any]]:
    """Every watched ConfigMap by (namespace, name)."""
    return {(namespace or "", name): _snapshot(body)}


@kopf.index("configmaps", annotations={OWNER_UID_ANNOTATION: kopf.PRESENT})
async def copies_by_owner(
    *, namespace: str | None, name: str, annotations: kopf.Annotations, **_: Any
) -> dict[str, Key]:
    """The (namespace, name) of every ConfigMap annotated with a mirror's UID."""
    return {annotations[OWNER_UID_ANNOTATION]: (namespace or "", name)}


@kopf.index(GROUP, VERSION, PLURAL)
async def mirrors(
    *, namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, dict[str, Any]]:
    """Every ConfigMirror by (namespace, name)."""
    return {(namespace or "", name): _snapshot(body)}


@kopf.index(GROUP, VERSION, PLURAL)
async def mirrors_by_configmap(
    *, namespace: str | None, name: str, uid: str, spec: kopf.Spec, **_: Any
) -> dict[Key | str, Key]:
    """The mirrors concerned by a ConfigMap: as their source, at a target, or by UID."""
    source = spec.get("source", "")
    keys: list[Key | str] = [(namespace or "", source), uid]
    keys += [(target, source) for target in _targets(spec)]
    return dict.fromkeys(keys, (namespace or "", name))


def _one(index: kopf.Index[Any, Any], key: Any) -> Any:
    return next(iter(index.get(key, ())), None)


# -- the decision: pure ----------------------------------------------------------------------


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _owner_uid(configmap: Obj) -> str | None:
    value = (_meta(configmap).get("annotations") or {}).get(OWNER_UID_ANNOTATION)
    return value if isinstance(value, str) else None


def _desired_copy(source: Obj, namespace: str, uid: str, existing: Obj | None) -> dict[str, Any]:
    base = _meta(existing) if existing is not None else {}
    metadata: dict[str, Any] = {
        "name": _meta(source)["name"],
        "namespace": namespace,
        "labels": {**(base.get("labels") or {}), MANAGED_BY_LABEL: MANAGED_BY_VALUE},
        "annotations": {**(base.get("annotations") or {}), OWNER_UID_ANNOTATION: uid},
    }
    if existing is not None:
        metadata["resourceVersion"] = base["resourceVersion"]
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
    for field in ("data", "binaryData"):
        if source.get(field):
            body[field] = source[field]
    return body


def _in_sync(existing: Obj, desired: Obj) -> bool:
    labels = _meta(existing).get("labels") or {}
    return (
        (existing.get("data") or {}) == (desired.get("data") or {})
        and (existing.get("binaryData") or {}) == (desired.get("binaryData") or {})
        and labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        and _owner_uid(existing) == _owner_uid(desired)
    )


def _status(
    mirror: Obj, ready: bool, reason: str, message: str, targets: list[dict[str, str]]
) -> dict[str, Any]:
    generation = _meta(mirror).get("generation", 0)
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition["lastTransitionTime"] = now
    for old in (mirror.get("status") or {}).get("conditions") or ():
        if old.get("type") == "Ready" and old.get("status") == condition["status"]:
            condition["lastTransitionTime"] = old.get("lastTransitionTime") or now
    return {"observedGeneration": generation, "conditions": [condition], "targets": targets}


# -- the writes ------------------------------------------------------------------------------


async def _write(call: Any, *args: Any, missing_ok: bool = False, **kwargs: Any) -> None:
    try:
        await call(*args, **kwargs)
    except ApiException as exc:
        if exc.status == 404 and missing_ok:
            return
        if exc.status in (404, 409):
            raise Stale(f"{exc.status} {exc.reason}") from exc
        raise


async def _delete_copy(api: k8s.ApiClient, configmap: Obj) -> None:
    meta = _meta(configmap)
    preconditions = {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
    await _write(
        k8s.CoreV1Api(api).delete_namespaced_config_map,
        meta["name"],
        meta["namespace"],
        body={"preconditions": preconditions},
        missing_ok=True,
    )


def _managed(
    uid: str, configmaps: kopf.Index[Any, Any], copies_by_owner: kopf.Index[Any, Any]
) -> list[Obj]:
    found = (_one(configmaps, key) for key in copies_by_owner.get(uid, ()))
    return [c for c in found if c is not None and _owner_uid(c) == uid]


async def sync_copies(
    api: k8s.ApiClient,
    mirror: Obj,
    configmaps: kopf.Index[Any, Any],
    copies_by_owner: kopf.Index[Any, Any],
) -> dict[str, Any]:
    """Create, update and delete the mirror's copies; return the status it should have."""
    meta, spec = _meta(mirror), mirror.get("spec") or {}
    uid, namespace = meta["uid"], meta["namespace"]
    source_name = spec.get("source", "")
    targets = list(dict.fromkeys(_targets(spec)))
    source = _one(configmaps, (namespace, source_name))
    core = k8s.CoreV1Api(api)
    states: list[dict[str, str]] = []
    conflicts: list[str] = []
    for target in targets:
        existing = _one(configmaps, (target, source_name))
        where = f"{target}/{source_name}"
        if existing is not None and _owner_uid(existing) != uid:
            conflicts.append(where)
            message = f"ConfigMap {where} exists and is not managed by this ConfigMirror"
            states.append({"namespace": target, "state": "Conflict", "message": message})
            continue
        if source is None:
            states.append(
                {"namespace": target, "state": "Pending", "message": "waiting for the source"}
            )
            continue
        desired = _desired_copy(source, target, uid, existing)
        if existing is None:
            await _write(core.create_namespaced_config_map, target, desired)
        elif not _in_sync(existing, desired):
            await _write(core.replace_namespaced_config_map, source_name, target, desired)
        states.append({"namespace": target, "state": "Synced", "message": ""})

    wanted = set(targets)
    for copy_ in _managed(uid, configmaps, copies_by_owner):
        copy_meta = _meta(copy_)
        if copy_meta["namespace"] not in wanted or copy_meta["name"] != source_name:
            await _delete_copy(api, copy_)

    if source is None:
        message = f"ConfigMap {namespace}/{source_name} not found"
        return _status(mirror, False, "SourceNotFound", message, states)
    if conflicts:
        message = f"not managed by this ConfigMirror, left untouched: {', '.join(conflicts)}"
        return _status(mirror, False, "TargetConflict", message, states)
    message = f"mirrored to {len(targets)} namespace(s)"
    return _status(mirror, True, "Synced", message, states)


def _lock(uid: str) -> asyncio.Lock:
    return _locks.setdefault(uid, asyncio.Lock())


# -- handlers ----------------------------------------------------------------------------------
# kopf passes the indices as extra keyword arguments, which its handler protocols do not
# spell out: hence the ``type: ignore[arg-type]`` on the innermost decorators.


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")  # type: ignore[arg-type]
async def mirror_changed(
    *,
    body: kopf.Body,
    uid: str,
    patch: kopf.Patch,
    memo: kopf.Memo,
    configmaps: kopf.Index[Any, Any],
    copies_by_owner: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    """A new, changed or (at startup) existing ConfigMirror: make its copies right."""
    for attempt in range(RETRIES):
        async with _lock(uid):
            try:
                status = await sync_copies(memo.api, body, configmaps, copies_by_owner)
            except Stale:
                status = None
        if status is not None:
            if status != body.get("status"):
                for field, value in status.items():
                    patch.status[field] = value
            return
        await asyncio.sleep(0.05 * 2**attempt)
    raise kopf.TemporaryError("the cache is behind the API; trying again", delay=1)


@kopf.on.delete(GROUP, VERSION, PLURAL)  # type: ignore[arg-type]
async def mirror_deleted(
    *,
    uid: str,
    memo: kopf.Memo,
    configmaps: kopf.Index[Any, Any],
    copies_by_owner: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    """Delete every copy; kopf removes the finalizer once none is left."""
    async with _lock(uid):
        managed = _managed(uid, configmaps, copies_by_owner)
        for copy_ in managed:
            with contextlib.suppress(Stale):  # changed meanwhile: seen again below
                await _delete_copy(memo.api, copy_)
    if managed:
        raise kopf.TemporaryError(f"waiting for {len(managed)} copies to be gone", delay=1)
    _locks.pop(uid, None)


async def _reconcile_from_index(
    key: Key,
    *,
    api: k8s.ApiClient,
    mirrors: kopf.Index[Any, Any],
    configmaps: kopf.Index[Any, Any],
    copies_by_owner: kopf.Index[Any, Any],
    logger: kopf.Logger,
) -> None:
    for attempt in range(RETRIES):
        mirror = _one(mirrors, key)
        if mirror is None:
            return
        meta = _meta(mirror)
        if meta.get("deletionTimestamp") or FINALIZER not in (meta.get("finalizers") or ()):
            return  # kopf's own handlers own these phases
        async with _lock(meta["uid"]):
            mirror = _one(mirrors, key) or mirror
            try:
                status = await sync_copies(api, mirror, configmaps, copies_by_owner)
                if status != mirror.get("status"):
                    body = {
                        "metadata": {"resourceVersion": _meta(mirror)["resourceVersion"]},
                        "status": status,
                    }
                    await _write(
                        k8s.CustomObjectsApi(api).patch_namespaced_custom_object_status,
                        GROUP,
                        VERSION,
                        key[0],
                        PLURAL,
                        key[1],
                        body,
                        _content_type="application/merge-patch+json",
                    )
                return
            except Stale:
                pass
        await asyncio.sleep(0.05 * 2**attempt)
    logger.warning("ConfigMirror %s/%s: the cache stayed behind the API", *key)


@kopf.on.event("configmaps")  # type: ignore[arg-type]
async def configmap_changed(
    *,
    event: kopf.RawEvent,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    annotations: kopf.Annotations,
    memo: kopf.Memo,
    logger: kopf.Logger,
    mirrors: kopf.Index[Any, Any],
    mirrors_by_configmap: kopf.Index[Any, Any],
    configmaps: kopf.Index[Any, Any],
    copies_by_owner: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    """A ConfigMap changed: reconcile the mirrors it is the source, a target or a copy of."""
    if event["type"] is None:
        return  # the initial listing: the resume and create handlers look at every mirror
    keys = list(mirrors_by_configmap.get((namespace or "", name), ()))
    owner = annotations.get(OWNER_UID_ANNOTATION)
    if owner:
        owner_keys = list(mirrors_by_configmap.get(owner, ()))
        keys += owner_keys
        if event["type"] != "DELETED":
            # A copy exactly as its mirror wants it (typically one it just wrote) needs
            # nothing from that mirror; any other mirror naming this place still looks.
            keys = [
                k for k in keys if k not in owner_keys or not _settled(body, k, mirrors, configmaps)
            ]
    for key in dict.fromkeys(keys):
        await _reconcile_from_index(
            key,
            api=memo.api,
            mirrors=mirrors,
            configmaps=configmaps,
            copies_by_owner=copies_by_owner,
            logger=logger,
        )


def _settled(
    copy_: Obj, key: Key, mirrors: kopf.Index[Any, Any], configmaps: kopf.Index[Any, Any]
) -> bool:
    mirror = _one(mirrors, key)
    if mirror is None:
        return False
    meta, spec = _meta(mirror), mirror.get("spec") or {}
    source = _one(configmaps, (meta["namespace"], spec.get("source", "")))
    copy_meta = _meta(copy_)
    return (
        source is not None
        and _owner_uid(copy_) == meta["uid"]
        and copy_meta.get("name") == spec.get("source")
        and copy_meta.get("namespace") in (_targets(spec))
        and _in_sync(copy_, _desired_copy(source, copy_meta["namespace"], meta["uid"], copy_))
    )
