"""What one reconcile of a ConfigMirror must write, decided without I/O.

Rules: a ConfigMap is modified or deleted only if it is a copy this ConfigMirror made: it
has the source's name, the managed-by label and this ConfigMirror's UID in
``kubemoon.dev/owner-uid`` (anyone who may update a ConfigMap can add the annotation, so it
alone widens nobody's rights: a look-alike is reported in ``Plan.ignored``, never
written); a copy already being deleted counts as deleted (it is not deleted again, and does
not hold the finalizer); a copy made ``immutable`` that needs a change is deleted and
created again on a later reconcile (immutability is known from a full read of the copy, or
from a :class:`CopyData` the caller learned from a refused update); a namespace receives a
copy only if it allows it (the caller passes the namespaces that match the target selector,
by default those labelled ``kubemoon.dev/accept-mirrors=true``), and a managed copy in a
namespace that no longer allows it is deleted; every update and delete is conditional on the
resourceVersion (and UID) the plan was made from, so a concurrent change makes the write
fail with 409 and the key is reconciled again. Status is written only when it changes, so a
converged mirror costs no writes. Events are planned only when the Ready condition changes,
so a mirror that stays broken does not repeat its Warning at every reconcile.

Copies may be passed as metadata only (``PartialObjectMetadata``): each copy carries the
digest of its data in :data:`DATA_DIGEST_ANNOTATION`, and a copy is in sync only when that
annotation is the source's digest *and* the digest of the data it actually holds (from the
copy itself when passed in full, else from a :class:`CopyData` at the copy's very
resourceVersion) is too. The annotation alone proves nothing (whoever edits the data can
leave it as it was); a copy whose data is not known is not in sync.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubemoon_core import (
    DeleteOptions,
    GroupVersionResource,
    PatchType,
    Request,
    create_request,
    delete_request,
    patch_request,
    replace_request,
)
from kubemoon_core.sharding import OWNER_BUCKET_LABEL, owner_bucket_label

__all__ = [
    "ACCEPT_MIRRORS_LABEL",
    "ACCEPT_MIRRORS_SELECTOR",
    "CONFIGMAPS",
    "CONFIGMIRRORS",
    "CONFIGMIRRORS_V1BETA1",
    "DATA_DIGEST_ANNOTATION",
    "FINALIZER",
    "MANAGED_BY_LABEL",
    "MANAGED_BY_VALUE",
    "NAMESPACES",
    "OWNER_UID_ANNOTATION",
    "CopyData",
    "Plan",
    "PlannedEvent",
    "copy_data",
    "copy_settled",
    "data_digest",
    "is_copy",
    "mirror_targets",
    "plan_reconcile",
]

CONFIGMIRRORS = GroupVersionResource("kubemoon.dev", "v1alpha1", "configmirrors")
"""ConfigMirrors as v1alpha1 (still served, converted by the webhook)."""
CONFIGMIRRORS_V1BETA1 = GroupVersionResource("kubemoon.dev", "v1beta1", "configmirrors")
"""ConfigMirrors as v1beta1, the storage version: what the operator watches and writes."""
CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
NAMESPACES = GroupVersionResource("", "v1", "namespaces")
ACCEPT_MIRRORS_LABEL = "kubemoon.dev/accept-mirrors"
ACCEPT_MIRRORS_SELECTOR = f"{ACCEPT_MIRRORS_LABEL}=true"
"""The default target selector: a namespace opts in to receiving copies with this label."""
FINALIZER = "kubemoon.dev/cleanup"
OWNER_UID_ANNOTATION = "kubemoon.dev/owner-uid"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "kubemoon-configmirror"
DATA_DIGEST_ANNOTATION = "kubemoon.dev/data-sha256"
"""On every copy the operator writes: :func:`data_digest` of the data it wrote."""

Obj = Mapping[str, Any]


def _strings(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}


def data_digest(configmap: Obj) -> str:
    """The SHA-256 (hex) of a ConfigMap's ``data`` and ``binaryData``, canonically encoded:
    a JSON array of the two objects (absent or empty alike), keys sorted, no whitespace,
    UTF-8. Two ConfigMaps have the same digest exactly when their data are equal."""
    canonical = [_strings(configmap.get("data")), _strings(configmap.get("binaryData"))]
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class CopyData:
    """What a copy held at one version, for a copy the caller passes as metadata only.

    ``digest`` is :func:`data_digest` of the data it held at ``resource_version`` (``""``
    when unknown, as after an update refused because the copy is ``immutable``), and
    ``immutable`` whether it was ``immutable: true``. It answers only for that copy
    (``uid``) at that ``resource_version``.
    """

    uid: str
    resource_version: str
    digest: str
    immutable: bool = False

    def describes(self, configmap: Obj) -> bool:
        """Whether this is what ``configmap`` (its metadata) holds: same uid and version."""
        meta = _meta(configmap)
        return meta.get("uid") == self.uid and meta.get("resourceVersion") == self.resource_version


def copy_data(configmap: Obj) -> CopyData:
    """The :class:`CopyData` of a ConfigMap read in full."""
    meta = _meta(configmap)
    return CopyData(
        str(meta.get("uid", "")),
        str(meta.get("resourceVersion", "")),
        data_digest(configmap),
        configmap.get("immutable") is True,
    )


def _metadata_only(configmap: Obj) -> bool:
    return configmap.get("kind") == "PartialObjectMetadata"


def _actual(configmap: Obj, known: CopyData | None) -> CopyData | None:
    """What ``configmap`` holds: read from it if it is whole, else ``known`` if it
    describes this very version, else None (not known)."""
    if not _metadata_only(configmap):
        return copy_data(configmap)
    return known if known is not None and known.describes(configmap) else None


def _claimed_digest(configmap: Obj) -> str | None:
    """The digest a copy's :data:`DATA_DIGEST_ANNOTATION` claims (anyone may edit it)."""
    value = (_meta(configmap).get("annotations") or {}).get(DATA_DIGEST_ANNOTATION)
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class PlannedEvent:
    """A Kubernetes Event to record about the ConfigMirror (``type`` Normal or Warning)."""

    type: str
    reason: str
    note: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The writes of one reconcile, the Events to record, and whether to look again soon.

    ``copies`` are the ConfigMap writes (creates, updates and deletes of copies), each on a
    different object and none depending on another: they may go out together. ``mirror``
    are the writes to the ConfigMirror itself (its finalizer or its status), sent in order
    once every copy write succeeded, so a status never reports a copy that was not
    written. ``wait_for_deletions`` is true while the finalizer waits for deleted targets
    to be seen deleting or gone, or when an immutable copy was deleted to be created again;
    the caller requeues the key rather than wait for an event.
    ``list_copies`` is true when the finalizer could go but the managed copies were not
    read from the API server (only from caches, which may miss a copy whose labels were
    changed): the plan writes nothing, and the caller lists the copies and plans again
    with ``copies_listed=True``. ``ignored`` names (``namespace/name``) the ConfigMaps that
    carry the mirror's UID but are not its copies (another name, or no managed-by label):
    never written, for the caller to report; so are copies outside the namespaces the
    mirror targets and that accept copies whose UID the status does not record (a
    look-alike made where the mirror never wrote), and copies left in place because the
    caller may not delete them (``undeletable`` of :func:`plan_reconcile`).
    """

    copies: tuple[Request, ...] = ()
    mirror: tuple[Request, ...] = ()
    wait_for_deletions: bool = False
    events: tuple[PlannedEvent, ...] = ()
    list_copies: bool = False
    ignored: tuple[str, ...] = ()

    @property
    def writes(self) -> tuple[Request, ...]:
        """Every write, in the order they complete: the copies, then the mirror's own."""
        return self.copies + self.mirror


def _meta(obj: Obj) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _resource_of(mirror: Obj) -> GroupVersionResource:
    """The resource path of ``mirror``'s own version, so a write matches what was read."""
    version = str(mirror.get("apiVersion", "")).rpartition("/")[2]
    return CONFIGMIRRORS if version == "v1alpha1" else CONFIGMIRRORS_V1BETA1


def _selector(mirror: Obj) -> Mapping[str, str] | None:
    """The labels a v1beta1 ``namespaceSelector`` requires, or None when it selects nothing.

    Only a non-empty ``matchLabels`` of strings is honoured. Anything else (``{}``,
    ``matchExpressions``, values of other types) can only be a mirror stored before the
    admission webhook refused it; reading it as "every opted-in namespace" would widen
    what its author asked for, so it selects nothing.
    """
    targets = (mirror.get("spec") or {}).get("targets")
    selector = targets.get("namespaceSelector") if isinstance(targets, Mapping) else None
    if not isinstance(selector, Mapping) or set(selector) != {"matchLabels"}:
        return None
    labels = selector["matchLabels"]
    if not isinstance(labels, Mapping) or not labels:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        return None
    return dict(labels)


def namespace_labels(namespaces: Iterable[Obj]) -> dict[str, dict[str, str]]:
    """Name -> labels of cached Namespaces (what :func:`mirror_targets` selects from)."""
    return {str(_meta(ns).get("name")): dict(_meta(ns).get("labels") or {}) for ns in namespaces}


def mirror_targets(
    mirror: Obj, namespace_labels: Mapping[str, Mapping[str, str]] | None = None
) -> list[str]:
    """The namespaces ``mirror`` targets: those it names (v1alpha1 ``targetNamespaces`` or
    v1beta1 ``targets.namespaces``), then those of ``namespace_labels`` (name -> labels of
    the namespaces that accept copies) matching its v1beta1 ``namespaceSelector``, sorted.
    The mirror's own namespace is never selected."""
    spec = mirror.get("spec") or {}
    named = spec.get("targetNamespaces")
    if named is None:
        targets = spec.get("targets")
        named = targets.get("namespaces") if isinstance(targets, Mapping) else None
    result = [t for t in named or () if isinstance(t, str)]
    selector = _selector(mirror)
    if selector is not None and namespace_labels:
        home = _meta(mirror).get("namespace")
        result += sorted(
            name
            for name, labels in namespace_labels.items()
            if name != home and all(labels.get(k) == v for k, v in selector.items())
        )
    return list(dict.fromkeys(result))


def _owner_uid(configmap: Obj) -> str | None:
    annotations = _meta(configmap).get("annotations") or {}
    value = annotations.get(OWNER_UID_ANNOTATION)
    return value if isinstance(value, str) else None


def is_copy(configmap: Obj, uid: str, source_name: object) -> bool:
    """Whether ``configmap`` is a copy the mirror of ``uid`` made: the name it gives its
    copies (its source's), the managed-by label and its UID in the owner annotation."""
    meta = _meta(configmap)
    labels = meta.get("labels") or {}
    return (
        meta.get("name") == source_name
        and isinstance(labels, Mapping)
        and labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        and _owner_uid(configmap) == uid
    )


def _recorded_uids(mirror: Obj) -> set[str]:
    """The UIDs of the copies the mirror's status says the operator keeps."""
    targets = (mirror.get("status") or {}).get("targets")
    listed = targets if isinstance(targets, list) else ()
    return {t["uid"] for t in listed if isinstance(t, Mapping) and isinstance(t.get("uid"), str)}


def _deleting(configmap: Obj) -> bool:
    return bool(_meta(configmap).get("deletionTimestamp"))


def _where(configmap: Obj) -> str:
    meta = _meta(configmap)
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _named(items: list[str], limit: int = 10) -> str:
    """``items`` joined, at most ``limit`` of them, so a message stays bounded."""
    more = len(items) - limit
    return ", ".join(items[:limit]) + (f" (and {more} more)" if more > 0 else "")


def _delete_exactly(configmap: Obj) -> Request:
    meta = _meta(configmap)
    return delete_request(
        CONFIGMAPS,
        meta["name"],
        namespace=meta["namespace"],
        options=DeleteOptions(
            precondition_uid=meta.get("uid"),
            precondition_resource_version=meta.get("resourceVersion"),
        ),
    )


def _finalizers_patch(mirror: Obj, finalizers: list[str]) -> Request:
    meta = _meta(mirror)
    # A merge patch that names the resourceVersion is conditional, like an update.
    body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
    return patch_request(
        _resource_of(mirror),
        meta["name"],
        body,
        patch_type=PatchType.MERGE,
        namespace=meta["namespace"],
    )


def _desired_copy(
    source: Obj, namespace: str, uid: str, existing: Obj | None, *, sharded: bool = False
) -> dict[str, Any]:
    base_meta = dict(_meta(existing)) if existing is not None else {}
    labels = dict(base_meta.get("labels") or {})
    labels[MANAGED_BY_LABEL] = MANAGED_BY_VALUE
    if sharded:
        # The replica owning the mirror watches its copies by this label.
        labels[OWNER_BUCKET_LABEL] = owner_bucket_label(uid)
    annotations = dict(base_meta.get("annotations") or {})
    annotations[OWNER_UID_ANNOTATION] = uid
    annotations[DATA_DIGEST_ANNOTATION] = data_digest(source)
    metadata: dict[str, Any] = {
        "name": _meta(source)["name"],
        "namespace": namespace,
        "labels": labels,
        "annotations": annotations,
    }
    if existing is not None:
        metadata["resourceVersion"] = _meta(existing)["resourceVersion"]
    copy: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
    for field in ("data", "binaryData"):
        if source.get(field):
            copy[field] = source[field]
    return copy


def _in_sync(existing: Obj, desired: Obj, actual: CopyData | None) -> bool:
    """Whether ``existing`` is ``desired``: its labels, its owner, the digest it claims and
    the data it holds (``actual``; None when not known, which is not in sync)."""
    meta, want = _meta(existing), _meta(desired)
    labels = meta.get("labels") or {}
    digest = want["annotations"][DATA_DIGEST_ANNOTATION]
    return (
        actual is not None
        and actual.digest == digest
        and _claimed_digest(existing) == digest
        and labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        and _owner_uid(existing) == want["annotations"][OWNER_UID_ANNOTATION]
        and labels.get(OWNER_BUCKET_LABEL) == want["labels"].get(OWNER_BUCKET_LABEL)
    )


def copy_settled(
    copy: Obj,
    mirror: Obj,
    source: Obj | None,
    *,
    sharded: bool = False,
    known: CopyData | None = None,
) -> bool:
    """Whether ``copy`` is exactly what ``mirror`` wants there, as planning would find it.

    Typically it is the echo of the mirror's own write: a change that leaves a copy
    settled needs no reconcile of its mirror. Anything in doubt is not settled: a mirror
    being deleted, a missing source, a copy in a namespace the mirror only selects by label
    (the decision needs the namespace's labels), a copy passed as metadata only whose data
    ``known`` does not describe at its resourceVersion. ``sharded`` as for
    :func:`plan_reconcile`.
    """
    meta, mirror_meta = _meta(copy), _meta(mirror)
    uid = mirror_meta.get("uid")
    if source is None or mirror_meta.get("deletionTimestamp") or _owner_uid(copy) != uid:
        return False
    if meta.get("name") != (mirror.get("spec") or {}).get("source"):
        return False
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or namespace not in mirror_targets(mirror):
        return False
    desired = _desired_copy(source, namespace, str(uid), copy, sharded=sharded)
    return _in_sync(copy, desired, _actual(copy, known))


def _condition(status: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def _with_transition_time(
    condition: dict[str, Any], old_status: Mapping[str, Any], now_iso: str
) -> dict[str, Any]:
    for old in old_status.get("conditions") or ():
        same = isinstance(old, Mapping) and old.get("type") == condition["type"]
        if same and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
            return {**condition, "lastTransitionTime": old["lastTransitionTime"]}
    return {**condition, "lastTransitionTime": now_iso}


def _event_for(ready: Mapping[str, Any], old_status: Mapping[str, Any]) -> PlannedEvent | None:
    """The Event that reports ``ready``, unless the stored condition already says the same."""
    for old in old_status.get("conditions") or ():
        if isinstance(old, Mapping) and old.get("type") == ready["type"]:
            fields = ("status", "reason", "message")
            if all(old.get(f) == ready[f] for f in fields):
                return None
    kind = "Normal" if ready["status"] == "True" else "Warning"
    return PlannedEvent(kind, ready["reason"], ready["message"])


def plan_reconcile(
    mirror: Obj,
    source: Obj | None,
    copies_by_namespace: Mapping[str, Obj],
    managed_copies: Iterable[Obj],
    now_iso: str,
    *,
    allowed_namespaces: Collection[str],
    target_selector: str = ACCEPT_MIRRORS_SELECTOR,
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    sharded: bool = False,
    copies_listed: bool = False,
    unauthorized: Mapping[str, str] | None = None,
    known: Mapping[str, CopyData] | None = None,
    undeletable: Mapping[str, str] | None = None,
    unreadable: Mapping[str, str] | None = None,
    made: Container[str] = (),
) -> Plan:
    """Plan one reconcile of ``mirror``.

    ``source`` is the source ConfigMap or None; ``copies_by_namespace`` maps each target
    namespace to the ConfigMap of the source's name there, if one exists;
    ``managed_copies`` are all ConfigMaps annotated with this mirror's UID, wherever they
    are. ``allowed_namespaces`` are the namespaces that accept copies (they match
    ``target_selector``, which is only named in messages). ``now_iso`` is the wall-clock
    time for a condition's lastTransitionTime. ``namespace_labels`` (name -> labels of
    the namespaces that accept copies) resolves a v1beta1 ``namespaceSelector``; see
    :func:`mirror_targets`. ``mirror`` may be v1alpha1 or v1beta1: writes go to its version.
    With ``sharded`` every copy carries :data:`~kubemoon_core.sharding.OWNER_BUCKET_LABEL` with the
    mirror's bucket (the sharded operator watches its copies by it), and a copy whose
    label is missing or wrong is rewritten; without it, the label is left as found.

    Only copies are written: see ``is_copy`` (the owner annotation alone, which
    whoever may update a ConfigMap can add, is not enough), and outside the targets that
    accept copies only those whose UID the mirror's status records (``targets[].uid``,
    written for every copy kept; the status subresource is the operator's) or that the
    caller itself created (``made``: the UIDs its own creates were answered with, so a copy
    whose status record failed is not left behind when its namespace stops being a
    target); the others of ``managed_copies`` are named in ``Plan.ignored``. A mirror being
    deleted keeps its finalizer until every copy is deleted or being deleted (a DELETE
    accepted is the operator's work done, whatever finalizers the receiving tenant added),
    whatever its owner-bucket label says. Caches are selected by labels, so an empty
    ``managed_copies`` is trusted only with ``copies_listed`` (it includes every
    ConfigMap the API server holds with the managed-by label and this mirror's UID);
    otherwise the plan is a ``Plan.list_copies`` request.

    ``unauthorized`` maps the targets the mirror's author may no longer write to why:
    nothing is written there (a copy already there is left as it is) and Ready is False.
    ``undeletable`` maps the namespaces whose copy must not be deleted to why (the caller
    did not create that copy itself and the mirror's author may not delete it: every mark
    of a copy, its recorded UID included, can be put on a ConfigMap by whoever may update
    it or the mirror's status): such a copy is left in place and named in
    ``Plan.ignored``; a target whose copy cannot be replaced is reported like an
    unauthorized one; a mirror being deleted does not wait for it.
    ``unreadable`` maps the targets whose ConfigMap of the source's name exists but cannot
    be read (too deeply nested to decode) to why: nothing is written there, the target is
    a ``Conflict`` and Ready is False with reason ``TargetUnreadable``.

    A copy of ``copies_by_namespace`` may be metadata only; ``known`` (target namespace ->
    :class:`CopyData`) then says what it holds, if it describes that copy at that
    resourceVersion. A copy whose data is not known is written again (a conditional PUT),
    so callers read the ones that may be in sync first.
    """
    meta = _meta(mirror)
    uid, namespace = meta["uid"], meta["namespace"]
    finalizers = list(meta.get("finalizers") or [])
    spec = mirror.get("spec") or {}
    source_name = spec.get("source", "")
    managed: list[Obj] = []
    ignored: list[str] = []
    # Where this mirror may write now; elsewhere only the copies it recorded are its own.
    accepting = set(mirror_targets(mirror, namespace_labels)) & set(allowed_namespaces)
    recorded = _recorded_uids(mirror)
    for c in managed_copies:
        cm = _meta(c)
        if is_copy(c, uid, source_name) and (
            cm.get("namespace") in accepting or cm.get("uid") in recorded or cm.get("uid") in made
        ):
            managed.append(c)
        else:
            ignored.append(_where(c))
    # Already being deleted: its DELETE was accepted, it is not sent again.
    live = [c for c in managed if not _deleting(c)]
    left = undeletable or {}

    if meta.get("deletionTimestamp"):
        if FINALIZER not in finalizers:
            return Plan(ignored=tuple(ignored))
        ignored += [_where(c) for c in live if _meta(c).get("namespace") in left]
        live = [c for c in live if _meta(c).get("namespace") not in left]
        if live:
            deletes = tuple(_delete_exactly(c) for c in live)
            return Plan(deletes, wait_for_deletions=True, ignored=tuple(ignored))
        if not copies_listed:
            return Plan(list_copies=True, ignored=tuple(ignored))
        finalizers.remove(FINALIZER)
        return Plan(mirror=(_finalizers_patch(mirror, finalizers),), ignored=tuple(ignored))
    if FINALIZER not in finalizers:
        # Nothing is created before the finalizer is in place, so nothing can leak.
        return Plan(mirror=(_finalizers_patch(mirror, [*finalizers, FINALIZER]),))

    targets = mirror_targets(mirror, namespace_labels)
    writes: list[Request] = []
    target_states: list[dict[str, str]] = []
    conflicts: list[str] = []
    refused: list[str] = []
    denied: list[str] = []
    replacing: list[str] = []
    unread: list[str] = []
    requeue = False
    for target in targets:
        existing = copies_by_namespace.get(target)
        where = f"{target}/{source_name}"
        if target not in allowed_namespaces:
            # Opt-in: a namespace that does not ask for copies gets nothing written.
            refused.append(target)
            target_states.append(
                {
                    "namespace": target,
                    "state": "NotAllowed",
                    "message": f"namespace {target} does not match {target_selector}",
                }
            )
            continue
        if unauthorized and target in unauthorized:
            # The author may no longer write there: nothing is written for it (the state is the
            # CRD's NotAllowed, the message says why).
            denied.append(target)
            target_states.append(
                {"namespace": target, "state": "NotAllowed", "message": unauthorized[target]}
            )
            continue
        if unreadable and target in unreadable:
            unread.append(where)
            target_states.append(
                {"namespace": target, "state": "Conflict", "message": unreadable[target]}
            )
            continue
        if existing is not None and not is_copy(existing, uid, source_name):
            conflicts.append(where)
            target_states.append(
                {
                    "namespace": target,
                    "state": "Conflict",
                    "message": f"ConfigMap {where} exists and is not managed by this ConfigMirror",
                }
            )
            continue
        if source is None:
            target_states.append(
                {"namespace": target, "state": "Pending", "message": "waiting for the source"}
            )
            continue
        desired = _desired_copy(source, target, uid, existing, sharded=sharded)
        actual = None if existing is None else _actual(existing, (known or {}).get(target))
        if existing is None:
            writes.append(create_request(CONFIGMAPS, desired, namespace=target))
        elif not _in_sync(existing, desired, actual):
            if _deleting(existing) or (actual is not None and actual.immutable):
                # An immutable copy refuses every update (422): the operator's own object,
                # it is deleted and created again once gone. One being deleted is waited for.
                if not _deleting(existing) and target in left:
                    denied.append(target)
                    target_states.append(
                        {"namespace": target, "state": "NotAllowed", "message": left[target]}
                    )
                    continue
                if not _deleting(existing):
                    writes.append(_delete_exactly(existing))
                    requeue = True
                replacing.append(target)
                target_states.append(
                    {
                        "namespace": target,
                        "state": "Pending",
                        "message": f"replacing ConfigMap {where}, which cannot be updated "
                        "(immutable or being deleted)",
                    }
                )
                continue
            writes.append(replace_request(CONFIGMAPS, desired, namespace=target))
        synced = {"namespace": target, "state": "Synced", "message": ""}
        if existing is not None and isinstance(kept := _meta(existing).get("uid"), str):
            synced["uid"] = kept  # recorded: deleted wherever it ends up, see is_copy
        target_states.append(synced)

    wanted = set(targets) - set(refused)
    for copy in live:
        if _meta(copy).get("namespace") in wanted:
            continue
        if _meta(copy).get("namespace") in left:
            ignored.append(_where(copy))
        else:
            writes.append(_delete_exactly(copy))

    generation = meta.get("generation", 0)
    if source is None:
        ready = _condition(
            False, "SourceNotFound", f"ConfigMap {namespace}/{source_name} not found", generation
        )
    elif refused:
        ready = _condition(
            False,
            "TargetNotAllowed",
            f"namespace(s) not matching {target_selector}, nothing written there: "
            f"{', '.join(refused)}",
            generation,
        )
    elif denied:
        ready = _condition(
            False,
            "AuthorNotAllowed",
            "the ConfigMirror's author may no longer write the copy, nothing written there: "
            f"{', '.join(denied)}",
            generation,
        )
    elif conflicts:
        ready = _condition(
            False,
            "TargetConflict",
            f"not managed by this ConfigMirror, left untouched: {', '.join(conflicts)}",
            generation,
        )
    elif unread:
        ready = _condition(
            False,
            "TargetUnreadable",
            f"ConfigMaps that cannot be read, left untouched: {_named(unread)}",
            generation,
        )
    elif replacing:
        ready = _condition(
            False,
            "ReplacingCopy",
            f"copies that cannot be updated are being replaced in: {_named(replacing)}",
            generation,
        )
    else:
        ready = _condition(True, "Synced", f"mirrored to {len(targets)} namespace(s)", generation)

    old_status = mirror.get("status") or {}
    status = {
        "observedGeneration": generation,
        "conditions": [_with_transition_time(ready, old_status, now_iso)],
        "targets": target_states,
    }
    own: tuple[Request, ...] = ()
    if status != old_status:
        updated = {**mirror, "status": status}
        own = (
            replace_request(
                _resource_of(mirror), updated, namespace=namespace, subresource="status"
            ),
        )
    event = _event_for(ready, old_status)
    return Plan(
        tuple(writes),
        own,
        wait_for_deletions=requeue,
        events=(event,) if event is not None else (),
        ignored=tuple(ignored),
    )
