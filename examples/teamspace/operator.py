"""The TeamSpace operator: a TeamSpace gets a Namespace ``team-<name>`` with a quota and a
RoleBinding making its owners admins; a webhook refuses ``system:`` owners. Run it with
``kubemoon run examples/teamspace/operator.py:manager`` (crd.yaml, rbac.yaml: generated)."""

from dataclasses import dataclass
from typing import Annotated

from kubemoon_asyncio import Client, Manager, ReconcileContext
from kubemoon_core import Outcome, Reconciled, Scope
from kubemoon_core.builtin import Namespace, ResourceQuota, RoleBinding
from kubemoon_core.builtin.core_v1 import ResourceQuotaSpec
from kubemoon_core.builtin.rbac_v1 import RoleRef, Subject
from kubemoon_core.rbac import PolicyRule
from kubemoon_core.typed import (
    Condition,
    Description,
    Length,
    ListType,
    MetadataField,
    custom_resource,
)
from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, WebhookDeclarations

RBAC = "rbac.authorization.k8s.io"
#: Binding ``admin`` needs ``bind`` on it (the apiserver's escalation check): rbac_extra.
BIND_ADMIN = PolicyRule(
    RBAC, "clusterroles", frozenset({"bind"}), resource_names=frozenset({"admin"})
)


@dataclass(slots=True)
class TeamSpaceSpec:
    """The team's namespace as wanted."""

    owners: Annotated[list[str], Length(min=1), Description("Users made admins there.")]
    cpu: Annotated[str, Description("The quota of requests.cpu.")] = "4"
    memory: Annotated[str, Description("The quota of requests.memory.")] = "8Gi"


@dataclass(slots=True)
class TeamSpaceStatus:
    """What the operator last did."""

    namespace: str | None = None
    observed_generation: int | None = None
    conditions: Annotated[list[Condition] | None, ListType("map", ("type",))] = None


@custom_resource(group="examples.kubemoon.dev", version="v1", scope=Scope.CLUSTER)
@dataclass(slots=True)
class TeamSpace:
    """A team's namespace, with its quota and its admins."""

    spec: TeamSpaceSpec
    status: TeamSpaceStatus | None = None
    metadata: MetadataField = MetadataField()


hooks = WebhookDeclarations("teamspaces")


@hooks.validating("/validate-teamspace", TeamSpace)
def no_system_owners(request: AdmissionRequest[TeamSpace]) -> AdmissionResponse:
    """Refuse a TeamSpace owned by a ``system:`` user (they are no people)."""
    owners = request.object.spec.owners if request.object else []
    system = [owner for owner in owners if owner.startswith("system:")]
    if system:
        return AdmissionResponse.deny(f"a team cannot be owned by {', '.join(system)}")
    return AdmissionResponse.allow()


async def reconcile(ctx: ReconcileContext[TeamSpace]) -> Outcome:
    """Make the team's Namespace, quota and admins match its spec; report them."""
    team = ctx.obj
    if team is None:
        return Reconciled()  # deleted: the garbage collector removes what it owned
    namespace = f"team-{ctx.name}"
    await ctx.ensure(Namespace(metadata={"name": namespace}))
    hard = {"requests.cpu": team.spec.cpu, "requests.memory": team.spec.memory}
    where = {"name": "team", "namespace": namespace}
    await ctx.ensure(ResourceQuota(metadata=where, spec=ResourceQuotaSpec(hard=hard)))
    admins = [Subject(kind="User", name=owner, api_group=RBAC) for owner in team.spec.owners]
    role = RoleRef(api_group=RBAC, kind="ClusterRole", name="admin")
    binding = {**where, "name": "team-admins"}
    await ctx.ensure(RoleBinding(metadata=binding, role_ref=role, subjects=admins))
    ready = all((ctx.owned(Namespace), ctx.owned(ResourceQuota), ctx.owned(RoleBinding)))
    conditions = ctx.condition("Ready", ready, "Provisioned" if ready else "Provisioning")
    await ctx.update_status(TeamSpaceStatus(namespace, team.metadata.generation, conditions))
    return Reconciled()


def manager(client: Client) -> Manager:
    """The operator's Manager on asyncio: ``kubemoon run`` hands it the client and runs it."""
    manager = Manager(client, name="teamspaces.examples.kubemoon.dev")
    controller = manager.controller("teamspaces", TeamSpace)
    controller.owns(Namespace).owns(ResourceQuota).owns(RoleBinding).complete(reconcile)
    manager.serve_webhooks(hooks)
    manager.rbac_extra.append(BIND_ADMIN)
    return manager
