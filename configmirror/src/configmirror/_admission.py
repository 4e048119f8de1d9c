"""What the ConfigMirror admission webhooks decide, without I/O.

Rules:

- Decisions are made on the storage form: :func:`storage_form` converts an object of
  either served version to v1beta1 with ConfigMirror's own conversion, so a v1alpha1
  request (its selector in an annotation) is judged on exactly what will be stored.
- :func:`validate_mirror` lists every problem at once: an empty source, invalid or
  repeated target namespaces, a target equal to the mirror's own namespace, more than
  :data:`MAX_TARGETS` targets, a namespaceSelector that is empty or that the operator
  would read as broader than written (anything but a non-empty ``matchLabels`` of valid
  label keys and values), the conversion annotation on a v1beta1 object.
- :func:`required_checks` lists the access a request's user must have themselves: on
  CREATE, ``get`` on the source and ``create configmaps`` in every target (in every
  namespace, :data:`ALL_NAMESPACES`, for a selector); on UPDATE, the same for what the
  change adds (a new source re-checks everything; an unchanged :class:`MirrorReach`
  needs no review). :func:`access_review` builds each SubjectAccessReview and
  :func:`access_denial` reads its answer; :class:`DecisionCache` keeps answers for a few
  seconds, keyed by everything the review asked.
- :func:`deletion_update` says when an update only finishes a deletion: the object is
  being deleted and nothing but its finalizers changes. It is always admitted: the
  operator only cleans up after a mirror that is being deleted, whatever its spec says.
  Any other change of a deleting object is validated like any update.
- :func:`expected_author` is the :data:`AUTHOR_ANNOTATION` an admitted object carries:
  the requesting user (:func:`author_value`) on CREATE and on an UPDATE that widens the
  reach, the stored value otherwise; the mutating webhook sets it, the validating webhook
  refuses anything else, and the operator reads it with :func:`parse_author` to review
  that user again before each write of a copy.
- The defaults of :func:`default_mirror` are a pure function of the object, so the
  mutating webhook's JSON Patch is computed by the core from (object, defaulted object).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubemoon_core import GroupVersionResource
from kubemoon_core.errors import ConversionError
from kubemoon_core.webhooks import AdmissionRequest, Operation, UserInfo

from ._convert import SELECTOR_ANNOTATION, V1ALPHA1, V1BETA1, converter

__all__ = [
    "ALL_NAMESPACES",
    "AUTHOR_ANNOTATION",
    "MAX_AUTHOR_LENGTH",
    "MAX_ACCESS_REVIEWS",
    "MAX_TARGETS",
    "SOURCE_LABEL",
    "SUBJECT_ACCESS_REVIEWS",
    "AccessCheck",
    "DecisionCache",
    "MirrorReach",
    "access_denial",
    "access_review",
    "author_annotation",
    "author_value",
    "expected_author",
    "parse_author",
    "cap_denial",
    "decision_key",
    "default_mirror",
    "deletion_update",
    "mirror_reach",
    "required_checks",
    "storage_form",
    "target_namespaces",
    "validate_mirror",
]

ALL_NAMESPACES = ""
"""The namespace of an access review about every namespace."""
MAX_TARGETS = 100
"""The most target namespaces one ConfigMirror may name."""
MAX_ACCESS_REVIEWS = 20
"""The most SubjectAccessReviews one admission request may cause (by default)."""
SOURCE_LABEL = "kubemoon.dev/mirror-source"
"""Set by the mutating webhook to the source's name, so mirrors can be selected by source."""
AUTHOR_ANNOTATION = "kubemoon.dev/author"
"""Who a mirror acts for: set by the mutating webhook from the request's userInfo (the
user whose access was reviewed), checked by the validating webhook, re-reviewed by the
operator before it writes a copy."""
MAX_AUTHOR_LENGTH = 16_384
"""The longest :data:`AUTHOR_ANNOTATION` value the operator reads (longer: unreadable)."""
SUBJECT_ACCESS_REVIEWS = GroupVersionResource("authorization.k8s.io", "v1", "subjectaccessreviews")

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_CONVERTER = converter()


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def storage_form(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` (a ConfigMirror of either served version) as v1beta1, the storage version.

    Raises :class:`~kubemoon_core.errors.ConversionError` when it cannot be converted without
    changing its meaning, or has an apiVersion that is not served.
    """
    version = obj.get("apiVersion")
    if version not in (V1ALPHA1, V1BETA1):
        raise ConversionError(f"apiVersion {version!r} is not a served ConfigMirror version")
    return _CONVERTER.convert(obj, V1BETA1)


def target_namespaces(obj: Mapping[str, Any]) -> list[str]:
    """The target namespaces a ConfigMirror names, in either served version.

    v1alpha1 lists them in ``spec.targetNamespaces``; v1beta1 in
    ``spec.targets.namespaces``.
    """
    spec = _spec(obj)
    raw = spec.get("targetNamespaces")
    if raw is None:
        targets = spec.get("targets")
        raw = targets.get("namespaces") if isinstance(targets, Mapping) else None
    return list(raw) if isinstance(raw, list) else []


def _selector(beta: Mapping[str, Any]) -> Any:
    targets = _spec(beta).get("targets")
    return targets.get("namespaceSelector") if isinstance(targets, Mapping) else None


def _selector_problems(selector: Any) -> list[str]:
    """Why the operator would read ``selector`` as broader than written (or not at all)."""
    if selector is None:
        return []
    where = "spec.targets.namespaceSelector"
    if not isinstance(selector, Mapping):
        return [f"{where} must be an object"]
    problems = []
    unknown = sorted(set(selector) - {"matchLabels"})
    if unknown:
        problems.append(f"{where} may only hold matchLabels, not {', '.join(unknown)}")
    labels = selector.get("matchLabels")
    if not isinstance(labels, Mapping) or not labels:
        problems.append(
            f"{where} must name at least one label in matchLabels: an empty selector "
            "would select every namespace that accepts copies"
        )
        return problems
    for key, value in labels.items():
        if not _valid_label_key(key):
            problems.append(f"{where}.matchLabels: {key!r} is not a valid label key")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            problems.append(f"{where}.matchLabels[{key!r}]: {value!r} is not a valid label value")
    return problems


def _valid_label_key(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def validate_mirror(obj: Mapping[str, Any], namespace: str) -> list[str]:
    """Every problem of ``obj`` (a ConfigMirror of either version in ``namespace``), judged
    on its v1beta1 form; empty when it is valid."""
    try:
        beta = storage_form(obj)
    except ConversionError as exc:
        return [str(exc)]
    problems: list[str] = []
    source = _spec(beta).get("source")
    if not isinstance(source, str) or not source:
        problems.append("spec.source must name a ConfigMap")
    elif len(source) > 253 or not _DNS_SUBDOMAIN.fullmatch(source):
        problems.append(f"spec.source {source!r} is not a valid ConfigMap name")
    targets = target_namespaces(beta)
    if len(targets) > MAX_TARGETS:
        problems.append(f"at most {MAX_TARGETS} target namespaces, got {len(targets)}")
    seen: set[str] = set()
    for target in targets:
        if not isinstance(target, str) or len(target) > 63 or not _DNS_LABEL.fullmatch(target):
            problems.append(f"target namespace {target!r} is not a valid namespace name")
            continue
        if target in seen:
            problems.append(f"target namespace {target!r} is listed more than once")
        seen.add(target)
        if target == namespace:
            problems.append(
                f"target namespace {target!r} is the ConfigMirror's own namespace: "
                "the source is already there"
            )
    problems += _selector_problems(_selector(beta))
    annotations = _meta(beta).get("annotations")
    if isinstance(annotations, Mapping) and SELECTOR_ANNOTATION in annotations:
        problems.append(
            f"annotation {SELECTOR_ANNOTATION} is reserved for conversion: in v1beta1 "
            "the selector is spec.targets.namespaceSelector"
        )
    return problems


@dataclass(frozen=True, slots=True)
class MirrorReach:
    """What a mirror makes the operator do: copy ``source`` into ``namespaces`` and into
    every accepting namespace whose labels include ``selector`` (None: no selector)."""

    source: Any
    namespaces: frozenset[str]
    selector: tuple[tuple[str, str], ...] | None


def mirror_reach(beta: Mapping[str, Any]) -> MirrorReach:
    """The :class:`MirrorReach` of a v1beta1 ConfigMirror (see :func:`storage_form`)."""
    selector = _selector(beta)
    labels = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    pairs = None
    if selector is not None:
        items = labels.items() if isinstance(labels, Mapping) else ()
        pairs = tuple(sorted((str(k), str(v)) for k, v in items))
    named = frozenset(t for t in target_namespaces(beta) if isinstance(t, str))
    return MirrorReach(_spec(beta).get("source"), named, pairs)


@dataclass(frozen=True, slots=True)
class AccessCheck:
    """One thing the requesting user must be allowed: ``verb`` on ConfigMaps in
    ``namespace`` (:data:`ALL_NAMESPACES` for every namespace), ``name`` for one object."""

    verb: str
    namespace: str
    name: str = ""

    def describe(self) -> str:
        """The check in words, for a denial."""
        if self.verb == "get":
            return f"get ConfigMap {self.namespace}/{self.name}"
        if self.namespace == ALL_NAMESPACES:
            return f"{self.verb} ConfigMaps in all namespaces"
        return f"{self.verb} ConfigMaps in namespace {self.namespace!r}"


def required_checks(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], namespace: str
) -> list[AccessCheck]:
    """The access checks a change from ``old`` (None on CREATE) to ``new`` needs, both in
    their v1beta1 form, for a mirror in ``namespace``.

    Nothing when what the mirror reaches is unchanged or only narrowed; otherwise ``get``
    on the source first, then ``create`` in all namespaces when a selector is added or
    changed, then ``create`` in each named namespace added (every one for a new source).
    """
    after = mirror_reach(new)
    before = mirror_reach(old) if old is not None else None
    if before is None or before.source != after.source:
        added = sorted(after.namespaces)
        selector_widens = after.selector is not None
    else:
        added = sorted(after.namespaces - before.namespaces)
        selector_widens = after.selector is not None and after.selector != before.selector
    if not added and not selector_widens:
        return []
    checks = [AccessCheck("get", namespace, str(after.source))]
    if selector_widens:
        checks.append(AccessCheck("create", ALL_NAMESPACES))
    checks += [AccessCheck("create", target) for target in added]
    return checks


def cap_denial(checks: Sequence[AccessCheck], cap: int) -> str:
    """The denial of a change needing more than ``cap`` access reviews in one request."""
    named = sum(1 for c in checks if c.verb == "create" and c.namespace != ALL_NAMESPACES)
    fixed = len(checks) - named
    return (
        f"this change needs {len(checks)} access reviews, more than the {cap} one admission "
        f"request may cause (the cap on SubjectAccessReviews per request); add at most "
        f"{max(cap - fixed, 0)} new target namespaces per change, or have someone who may "
        "create ConfigMaps in all namespaces make it"
    )


def access_review(user: UserInfo, check: AccessCheck) -> dict[str, Any]:
    """The SubjectAccessReview: may ``user`` do ``check`` on ConfigMaps?"""
    attributes: dict[str, Any] = {
        "namespace": check.namespace,
        "verb": check.verb,
        "group": "",
        "version": "v1",
        "resource": "configmaps",
    }
    if check.name:
        attributes["name"] = check.name
    spec: dict[str, Any] = {
        "user": user.username,
        "groups": list(user.groups),
        "resourceAttributes": attributes,
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra.items()}
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    }


def decision_key(user: UserInfo, check: AccessCheck) -> tuple[Any, ...]:
    """Everything a review asks, as a cache key: the same key, the same answer."""
    extra = tuple(sorted((k, tuple(v)) for k, v in user.extra.items()))
    return (
        user.username,
        user.uid,
        tuple(sorted(user.groups)),
        extra,
        check.verb,
        check.namespace,
        "configmaps",
        check.name,
    )


def access_denial(answer: Mapping[str, Any], user: UserInfo, check: AccessCheck) -> str | None:
    """The denial message for a SubjectAccessReview ``answer``; None when access is allowed."""
    status = answer.get("status")
    status = status if isinstance(status, Mapping) else {}
    if status.get("allowed") is True and status.get("denied") is not True:
        return None
    why = status.get("reason") or status.get("evaluationError")
    because = f" ({why})" if isinstance(why, str) and why else ""
    if check.verb == "get":
        return (
            f"user {user.username!r} may not get ConfigMap {check.namespace}/{check.name}"
            f"{because}: a ConfigMirror may only copy a source its author could read"
        )
    if check.namespace == ALL_NAMESPACES:
        return (
            f"user {user.username!r} may not create ConfigMaps in all namespaces{because}: "
            "a ConfigMirror with a namespaceSelector needs that right"
        )
    if check.verb == "delete":
        return (
            f"user {user.username!r} may not delete ConfigMaps in namespace "
            f"{check.namespace!r}{because}: the operator deletes a copy it did not create "
            "only where the ConfigMirror's author could delete it"
        )
    return (
        f"user {user.username!r} may not {check.verb} ConfigMaps in namespace "
        f"{check.namespace!r}{because}: "
        "a ConfigMirror may only target namespaces where its author could write the copy"
    )


class DecisionCache:
    """Access-review answers (a denial message, or None for allowed) for ``ttl`` seconds.

    At most ``max_entries`` are kept; the oldest goes first. Time comes in as ``now``
    (monotonic seconds): the cache reads no clock.
    """

    def __init__(self, ttl: float = 5.0, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[tuple[Any, ...], tuple[float, str | None]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[Any, ...], now: float) -> tuple[bool, str | None]:
        """``(found, denial)``: whether a fresh answer is kept, and that answer."""
        entry = self._entries.get(key)
        if entry is None or entry[0] <= now:
            if entry is not None:
                del self._entries[key]
            self.misses += 1
            return False, None
        self.hits += 1
        return True, entry[1]

    def put(self, key: tuple[Any, ...], denial: str | None, now: float) -> None:
        """Keep an answer until ``now + ttl``."""
        if self.ttl <= 0:
            return
        self._entries.pop(key, None)
        while len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = (now + self.ttl, denial)


# What finishing a deletion changes, or what the apiserver itself maintains: the only
# differences between oldObject and object an update of a deleting mirror may make
# without being validated. Status cannot change through the main resource (the apiserver
# keeps the stored one), so it is left out of the comparison too.
_DELETION_EXEMPT_METADATA = frozenset(
    {"finalizers", "resourceVersion", "managedFields", "generation"}
)


def _without_exempt(obj: Mapping[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in obj.items() if k != "status"}
    rest["metadata"] = {k: v for k, v in _meta(obj).items() if k not in _DELETION_EXEMPT_METADATA}
    return rest


def deletion_update(request: AdmissionRequest) -> bool:
    """Whether ``request`` is an UPDATE of an object being deleted that changes nothing
    but its finalizers (what finishing a deletion needs): always admitted.

    Any other change of a deleting object -- its annotations (the conversion annotation
    among them), labels or spec -- is validated as usual: a deleting mirror is still
    stored, converted and listed, so it may not hold what validation refuses.
    """
    old, new = request.old_object, request.object
    if old is None or new is None or not _meta(old).get("deletionTimestamp"):
        return False
    return _without_exempt(old) == _without_exempt(new)


def author_value(user: UserInfo) -> str:
    """``user`` as the value of :data:`AUTHOR_ANNOTATION`: canonical JSON of its username,
    uid, groups and extra, so the same user always gives the same string."""
    return json.dumps(
        {
            "username": user.username,
            "uid": user.uid,
            "groups": list(user.groups),
            "extra": {key: list(values) for key, values in sorted(user.extra.items())},
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def author_annotation(obj: Mapping[str, Any] | None) -> str | None:
    """The :data:`AUTHOR_ANNOTATION` of ``obj`` (None: absent, or not a string)."""
    if obj is None:
        return None
    annotations = _meta(obj).get("annotations")
    value = annotations.get(AUTHOR_ANNOTATION) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) else None


def expected_author(request: AdmissionRequest) -> str | None:
    """The :data:`AUTHOR_ANNOTATION` ``request``'s object must carry (None: none).

    On CREATE, and on an UPDATE that widens what the mirror reaches (the updates whose
    user :func:`required_checks` reviews), the requesting user; on any other UPDATE, the
    stored object's value, unchanged -- so neither the operator's own updates (its
    finalizer) nor someone else's narrowing change replace the author, and nobody can
    name someone else. An object that cannot be converted keeps what it had (validation
    refuses it anyway).
    """
    user = author_value(request.user_info)
    if request.operation is Operation.CREATE or request.old_object is None:
        return user
    old_value = author_annotation(request.old_object)
    if request.object is None:
        return old_value
    try:
        new = storage_form(request.object)
    except ConversionError:
        return old_value
    try:
        old: dict[str, Any] | None = storage_form(request.old_object)
    except ConversionError:
        old = None  # judged as new, as the validation does
    return user if required_checks(old, new, request.namespace) else old_value


def parse_author(value: Any) -> UserInfo | None:
    """The user an :data:`AUTHOR_ANNOTATION` value names; None when it is not exactly
    what :func:`author_value` writes (wrong types, unknown keys, longer than
    :data:`MAX_AUTHOR_LENGTH`). The value is untrusted: it is read with these checks
    only, never evaluated."""
    if not isinstance(value, str) or len(value) > MAX_AUTHOR_LENGTH:
        return None
    try:
        raw = json.loads(value)
    except ValueError:
        return None
    if not isinstance(raw, dict) or set(raw) != {"username", "uid", "groups", "extra"}:
        return None
    username, uid, groups, extra = raw["username"], raw["uid"], raw["groups"], raw["extra"]
    if not isinstance(username, str) or not username or not isinstance(uid, str):
        return None
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        return None
    if not isinstance(extra, dict):
        return None
    pairs: dict[str, tuple[str, ...]] = {}
    for key, values in extra.items():
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return None
        pairs[key] = tuple(values)
    return UserInfo(username=username, uid=uid, groups=tuple(groups), extra=pairs)


def default_mirror(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with the defaults applied: sorted targets and the source label.

    Targets are only sorted, never de-duplicated, so a repeated target still reaches the
    validation and is refused with a message. The label is set when the source's name is
    a valid label value (a name of at most 63 characters). An object the validation will
    refuse for its size (more than :data:`MAX_TARGETS` targets) is returned unchanged:
    sizes are checked before any copying or sorting, which a hostile list would make costly.
    """
    if _oversized(obj):
        return dict(obj)
    result: dict[str, Any] = copy.deepcopy(dict(obj))
    spec = result.get("spec")
    if isinstance(spec, dict):
        _sort_targets(spec)
    source = _spec(result).get("source")
    if isinstance(source, str) and source and len(source) <= 63 and _LABEL_VALUE.fullmatch(source):
        metadata = result.setdefault("metadata", {})
        if isinstance(metadata, dict):
            labels = metadata.get("labels")
            if not isinstance(labels, dict):
                labels = metadata["labels"] = {}
            labels[SOURCE_LABEL] = source
    return result


def _oversized(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return False
    lists = [spec.get("targetNamespaces")]
    targets = spec.get("targets")
    if isinstance(targets, Mapping):
        lists.append(targets.get("namespaces"))
    return any(isinstance(v, list) and len(v) > MAX_TARGETS for v in lists)


def _sort_targets(spec: dict[str, Any]) -> None:
    def ordered(values: Sequence[Any]) -> list[Any]:
        return sorted(values, key=str)

    if isinstance(spec.get("targetNamespaces"), list):
        spec["targetNamespaces"] = ordered(spec["targetNamespaces"])
    targets = spec.get("targets")
    if isinstance(targets, dict) and isinstance(targets.get("namespaces"), list):
        targets["namespaces"] = ordered(targets["namespaces"])
