"""The TeamSpace operator written with kopf: a line-count reference for operator.py only.

Not run, not tested and not installed (kopf is not a dependency); it does what
operator.py does, as a kopf user writes it: the CRD is hand-written YAML (not counted
here), the status and conditions are plain dicts, and the webhook needs kopf's own server
settings. Run as ``kopf run examples/teamspace/kopf_equivalent.py``.
"""

import datetime

import kopf
import kubernetes

RBAC = "rbac.authorization.k8s.io"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.admission.server = kopf.WebhookServer(port=9443)
    settings.admission.managed = "teamspaces.examples.kubemoon.dev"


@kopf.on.validate("examples.kubemoon.dev", "v1", "teamspaces")
def no_system_owners(spec, **_):
    system = [owner for owner in spec.get("owners", []) if owner.startswith("system:")]
    if system:
        raise kopf.AdmissionError(f"a team cannot be owned by {', '.join(system)}")


def _apply(create, patch, body, *args):
    try:
        create(*args, body)
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:
            raise
        patch(body["metadata"]["name"], *args, body)


def _condition(status, ready, generation):
    now = datetime.datetime.now(datetime.UTC).isoformat()
    old = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    value = "True" if ready else "False"
    return {
        "type": "Ready",
        "status": value,
        "reason": "Provisioned" if ready else "Provisioning",
        "message": "",
        "observedGeneration": generation,
        "lastTransitionTime": old.get("lastTransitionTime", now)
        if old.get("status") == value
        else now,
    }


@kopf.on.create("examples.kubemoon.dev", "v1", "teamspaces")
@kopf.on.update("examples.kubemoon.dev", "v1", "teamspaces")
@kopf.on.resume("examples.kubemoon.dev", "v1", "teamspaces")
def reconcile(*, name, spec, status, meta, body, patch, **_):
    core = kubernetes.client.CoreV1Api()
    rbac = kubernetes.client.RbacAuthorizationV1Api()
    namespace = f"team-{name}"
    ns = {"metadata": {"name": namespace}}
    kopf.adopt(ns, owner=body)
    _apply(core.create_namespace, core.patch_namespace, ns)
    quota = {
        "metadata": {"name": "team"},
        "spec": {
            "hard": {
                "requests.cpu": spec.get("cpu", "4"),
                "requests.memory": spec.get("memory", "8Gi"),
            }
        },
    }
    kopf.adopt(quota, owner=body)
    quota["metadata"]["namespace"] = namespace
    _apply(
        core.create_namespaced_resource_quota,
        core.patch_namespaced_resource_quota,
        quota,
        namespace,
    )
    binding = {
        "metadata": {"name": "team-admins"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": owner} for owner in spec["owners"]],
    }
    kopf.adopt(binding, owner=body)
    binding["metadata"]["namespace"] = namespace
    _apply(
        rbac.create_namespaced_role_binding, rbac.patch_namespaced_role_binding, binding, namespace
    )
    patch.status["namespace"] = namespace
    patch.status["observedGeneration"] = meta["generation"]
    patch.status["conditions"] = [_condition(status, True, meta["generation"])]


@kopf.on.login()
def login(**kwargs):
    return kopf.login_via_client(**kwargs)
