"""Who the test kube-apiserver knows: token users and certificate common names.

Tokens are written to its token file (``kubemoon_testing._config_files``); certificates are
made by ``kubemoon_testing._pki``. Only the standard library.
"""

from __future__ import annotations

__all__ = [
    "ADMIN_USER",
    "CONTROLLER_MANAGER_USER",
    "LIMITED_USER",
    "MONITORING_USER",
    "NOBODY_USER",
]

#: Client certificate CN of the test kube-controller-manager (also in ``system:masters``).
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
#: Token user (and client certificate CN) in group ``system:masters``: bypasses RBAC.
ADMIN_USER = "kubemoon-admin"
# The common name of the client certificate the apiserver presents to webhooks.
_WEBHOOK_CLIENT_USER = "kube-apiserver-webhook-client"
#: Token user with no RBAC grant at all: gets 403 for anything but public endpoints.
NOBODY_USER = "nobody"
#: Token user with no grant until :meth:`ApiServer.grant_namespace_access` binds a Role.
LIMITED_USER = "limited"
# In group system:monitoring: a caller whose W3C traceparent a tracing kube-apiserver adopts.
MONITORING_USER = "kubemoon-monitoring"
_MONITORING_GROUP = "system:monitoring"

_ADMIN_GROUP = "system:masters"
