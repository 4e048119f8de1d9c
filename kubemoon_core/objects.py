"""Helpers for objects: conditions, finalizers, owner references, JSON patches and planned
writes.
"""

from ._conditions import (
    find_condition,
    is_status_condition_false,
    is_status_condition_true,
    remove_condition,
    set_condition,
)
from ._desired import (
    SERVER_SET_METADATA,
    WriteAction,
    WritePlan,
    apply_object,
    plan_status,
    plan_write,
    server_side_apply_request,
)
from ._finalizers import add_finalizer_request, has_finalizer, remove_finalizer_request
from ._jsonpatch import apply_json_patch, escape_pointer_token, json_patch
from ._ownership import (
    controller_of,
    enqueue_controller,
    is_owned_by,
    owner_reference,
    with_owner_reference,
)
from ._public import publish
from ._resources import validate_name, validate_namespace

__all__ = [
    "add_finalizer_request",
    "apply_json_patch",
    "apply_object",
    "controller_of",
    "enqueue_controller",
    "escape_pointer_token",
    "find_condition",
    "has_finalizer",
    "is_owned_by",
    "is_status_condition_false",
    "is_status_condition_true",
    "json_patch",
    "owner_reference",
    "plan_status",
    "plan_write",
    "remove_condition",
    "remove_finalizer_request",
    "SERVER_SET_METADATA",
    "server_side_apply_request",
    "set_condition",
    "validate_name",
    "validate_namespace",
    "with_owner_reference",
    "WriteAction",
    "WritePlan",
]

publish(__name__, globals(), __all__)
