"""Who a ConfigMirror acts for, re-checked before the operator writes a copy for it.

Rules: the validating webhook reviews a mirror's author once, at admission; the operator
then writes for as long as the mirror lives. So before it writes a copy it asks again,
with SubjectAccessReviews for the user the mutating webhook recorded in
:data:`~configmirror._admission.AUTHOR_ANNOTATION` (username, uid, groups, extra): ``get``
on the source, and in each target the verb of the write -- ``create`` before a POST,
``update`` before a PUT. A target the author may not write gets no write. Only the
writes a plan would make are reviewed, so a converged mirror costs no review; the
reviews are bounded by :class:`~configmirror._webhooks.AccessReviews` (at most a few at
once, identical ones in flight sent once, denials kept for ``decision_ttl``; an
allowance is not reused by a later reconcile, so a revoked right stops the next write).
A copy the operator did not create itself (it only carries a copy's marks, which whoever
may update a ConfigMap can add, and a UID the status records, which whoever may write the
mirror's status can add) is deleted only if the author may ``delete`` ConfigMaps there
(:func:`copy_deletes` lists a plan's deletes).
The annotation is untrusted input and is read by
:func:`~configmirror._admission.parse_author` only, in the reconcile. A mirror without the
annotation (stored before the mutating webhook was enabled) is not re-checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubemoon_core import KubeMoonError

from ._admission import AUTHOR_ANNOTATION, AccessCheck, author_annotation, parse_author
from ._plan import Plan, _meta
from ._webhooks import AccessReviews

__all__ = ["author_refusals", "copy_deletes", "copy_writes"]


def copy_writes(plan: Plan) -> dict[str, str]:
    """Namespace -> the verb of the plan's write of a copy there (``create`` for a POST,
    ``update`` for a PUT); deletes of the operator's own copies are not included."""
    verbs = {"POST": "create", "PUT": "update"}
    writes: dict[str, str] = {}
    for request in plan.copies:
        verb = verbs.get(request.method)
        parts = request.path.split("/")  # /api/v1/namespaces/<namespace>/configmaps[/name]
        if verb is not None and len(parts) > 4 and parts[3] == "namespaces":
            writes[parts[4]] = verb
    return writes


def copy_deletes(plan: Plan) -> dict[str, str]:
    """Namespace -> the UID of the copy the plan deletes there (its DELETE's precondition)."""
    deletes: dict[str, str] = {}
    for request in plan.copies:
        parts = request.path.split("/")  # /api/v1/namespaces/<namespace>/configmaps/<name>
        if request.method != "DELETE" or len(parts) < 5 or parts[3] != "namespaces":
            continue
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            body = {}
        uid = (body.get("preconditions") or {}).get("uid") if isinstance(body, dict) else None
        deletes[parts[4]] = uid if isinstance(uid, str) else ""
    return deletes


async def author_refusals(
    reviews: AccessReviews,
    mirror: Mapping[str, Any],
    writes: Mapping[str, str],
    *,
    read_source: bool = True,
) -> dict[str, str]:
    """The targets of ``writes`` (namespace -> verb, see :func:`copy_writes`) that
    ``mirror``'s recorded author may not write now, with why; empty when every write may
    go ahead (or no author is recorded). With ``read_source`` the author must also be
    allowed to ``get`` the source (what a write copies); a delete copies nothing."""
    if not writes:
        return {}
    value = author_annotation(mirror)
    if value is None:
        annotations = _meta(mirror).get("annotations")
        if isinstance(annotations, Mapping) and AUTHOR_ANNOTATION in annotations:
            value = ""  # present but not a string: unreadable
        else:
            return {}
    user = parse_author(value)
    if user is None:
        why = f"annotation {AUTHOR_ANNOTATION} cannot be read: nothing is written for it"
        return dict.fromkeys(writes, why)
    meta = _meta(mirror)
    spec = mirror.get("spec")
    source = spec.get("source") if isinstance(spec, Mapping) else None
    read = AccessCheck("get", str(meta.get("namespace", "")), str(source or ""))
    writes_checks = [AccessCheck(verb, namespace) for namespace, verb in writes.items()]
    checks = [read, *writes_checks] if read_source else writes_checks
    answers = await reviews.ask(user, list(dict.fromkeys(checks)))
    refusals: dict[str, str] = {}
    for namespace, verb in writes.items():
        for check in (
            (read, AccessCheck(verb, namespace)) if read_source else (AccessCheck(verb, namespace),)
        ):
            answer = answers[check]
            if isinstance(answer, KubeMoonError):
                refusals[namespace] = (
                    f"cannot check whether user {user.username!r} may {check.describe()}: {answer}"
                )
                break
            if answer is not None:
                refusals[namespace] = answer
                break
    return refusals
