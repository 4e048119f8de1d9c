"""ConfigMirror: an operator that mirrors a source ConfigMap into several namespaces.

It is an application built on the KubeMoon runtime (``kubemoon_trio.Manager``) with public
names only, and a model for writing another operator: the decisions live in a pure planner
(:func:`plan_reconcile`), the wiring in :class:`ConfigMirrorOperator`. Namespaces receive
copies only when they opt in (label ``kubemoon.dev/accept-mirrors=true`` by default).
"""

from ._convert import converter
from ._operator import ConfigMirrorOperator
from ._options import OperatorOptions
from ._plan import (
    ACCEPT_MIRRORS_LABEL,
    ACCEPT_MIRRORS_SELECTOR,
    CONFIGMAPS,
    CONFIGMIRRORS,
    CONFIGMIRRORS_V1BETA1,
    DATA_DIGEST_ANNOTATION,
    FINALIZER,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NAMESPACES,
    OWNER_UID_ANNOTATION,
    CopyData,
    Plan,
    PlannedEvent,
    copy_data,
    copy_settled,
    data_digest,
    mirror_targets,
    plan_reconcile,
)
from ._webhooks import (
    CONVERT_PATH,
    MUTATE_PATH,
    VALIDATE_PATH,
    AccessReviewer,
    ConfigMirrorWebhooks,
    webhook_declarations,
)

__all__ = [
    "webhook_declarations",
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
    "ConfigMirrorOperator",
    "CONVERT_PATH",
    "MUTATE_PATH",
    "VALIDATE_PATH",
    "AccessReviewer",
    "ConfigMirrorWebhooks",
    "CopyData",
    "OperatorOptions",
    "Plan",
    "PlannedEvent",
    "converter",
    "copy_data",
    "copy_settled",
    "data_digest",
    "mirror_targets",
    "plan_reconcile",
]
