"""ConfigMirror: an operator that mirrors a source ConfigMap into several namespaces.

It is an application built on ``kubemoon_trio`` and the core's controller machinery, and a
model for writing another operator: the decisions live in a pure planner
(:func:`plan_reconcile`), the I/O in a thin trio runner.
"""

from ._plan import (
    CONFIGMAPS,
    CONFIGMIRRORS,
    FINALIZER,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_UID_ANNOTATION,
    Plan,
    plan_reconcile,
)

__all__ = [
    "CONFIGMAPS",
    "CONFIGMIRRORS",
    "FINALIZER",
    "MANAGED_BY_LABEL",
    "MANAGED_BY_VALUE",
    "OWNER_UID_ANNOTATION",
    "Plan",
    "plan_reconcile",
]
