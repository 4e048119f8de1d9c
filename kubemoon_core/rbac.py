"""Role-based access: the rules a manager's declarations need, and the start-up permission
check.
"""

from ._public import publish
from ._rbac import Declared as RbacDeclared
from ._rbac import (
    DeclaredController,
    DeclaredWebhooks,
    GroupResource,
    Permission,
    PolicyRule,
    access_review_allowed,
    derive_rules,
    describe_missing,
    has_status,
    permissions_to_check,
    review_plan,
    rules_manifest,
)

__all__ = [
    "access_review_allowed",
    "DeclaredController",
    "DeclaredWebhooks",
    "derive_rules",
    "describe_missing",
    "GroupResource",
    "has_status",
    "Permission",
    "permissions_to_check",
    "PolicyRule",
    "RbacDeclared",
    "review_plan",
    "rules_manifest",
]

publish(__name__, globals(), __all__)
