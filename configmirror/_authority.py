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
The annotation is untrusted input and is read by
:func:`~configmirror._admission.parse_author` only, in the reconcile. A mirror without the
annotation (stored before the mutating webhook was enabled) is not re-checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubemoon_core import KubeMoonError

from ._admission import AUTHOR_ANNOTATION, AccessCheck, author_annotation, parse_author
from ._plan import Plan, _meta
from ._webhooks import AccessReviews

__all__ = ["author_refusals", "copy_writes"]


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


async def author_refusals(
    reviews: AccessReviews, mirror: Mapping[str, Any], writes: Mapping[str, str]
) -> dict[str, str]:
    """The targets of ``writes`` (see :func:`copy_writes`) that ``mirror``'s recorded
    author may not write now, with why; empty when every write may go ahead (or no author
    is recorded)."""
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
    checks = [read, *(AccessCheck(verb, namespace) for namespace, verb in writes.items())]
    answers = await reviews.ask(user, list(dict.fromkeys(checks)))
    refusals: dict[str, str] = {}
    for namespace, verb in writes.items():
        for check in (read, AccessCheck(verb, namespace)):
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
