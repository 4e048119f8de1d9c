"""The generated RBAC is exact, proven by the apiserver's audit log (issue 36).

A kube-apiserver of each test's own writes an audit log (Metadata level, every request of a
ServiceAccount, blocking mode so a request is in the log once answered). ConfigMirror runs
in-process as the ``configmirror`` ServiceAccount bound to exactly an overlay's rendered
RBAC and goes through its operations; then the log of that identity shows

- no request was denied (no 403), and
- every generated permission (each verb x resource x resource name x namespace scope of
  the rendered ClusterRole and Role) was used by at least one request.

An unused permission means the derivation is too broad or the scenario misses an
operation. Matching: a ClusterRole permission is used by a request in any namespace, a
Role permission by one in its namespace; a permission naming an object only by a request
for that object. A server-side apply that creates its object is audited as ``patch`` with
code 201: the apiserver authorizes it as ``create`` too, so it counts for ``create``.
The start-up check's SelfSubjectAccessReviews are no use of any rule (they name the review
resource, not the resource asked about).
"""

from __future__ import annotations

import datetime
import functools
import json
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import test_configmirror_rbac
import trio
import yaml
from conftest import ConversionServer, accept_mirrors, eventually, install_crd
from overlays import DEPLOY, RBAC_KINDS, rendered
from test_configmirror import configmap, get_or_none, mirror
from test_configmirror_rbac import service_account_client, wait_until_allowed

from configmirror import CONFIGMAPS, CONFIGMIRRORS, ConfigMirrorOperator, OperatorOptions
from configmirror._admission import AUTHOR_ANNOTATION, author_value
from kubemoon_core import EVENTS, GroupVersionResource, PatchType
from kubemoon_core._rbac import Permission
from kubemoon_core.errors import NotFound
from kubemoon_core.lowlevel import EventRecorder as EventMachine
from kubemoon_core.webhooks import UserInfo
from kubemoon_testing import ApiServer, MissingBinariesError, running_manager
from kubemoon_trio import Client, LeaderElectionConfig, ShardingConfig

pytestmark = pytest.mark.integration

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
"""
ADMISSION = "admissionregistration.k8s.io"
VALIDATING = GroupVersionResource(ADMISSION, "v1", "validatingwebhookconfigurations")
MUTATING = GroupVersionResource(ADMISSION, "v1", "mutatingwebhookconfigurations")
SECRETS = GroupVersionResource("", "v1", "secrets")
CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")


@dataclass
class Audited:
    server: ApiServer
    log: Path


@pytest.fixture
def audited(
    tmp_path_factory: pytest.TempPathFactory, conversion_webhook: ConversionServer
) -> Iterator[Audited]:
    tmp = tmp_path_factory.mktemp("audit")
    policy, log = tmp / "audit-policy.yaml", tmp / "audit.log"
    policy.write_text(AUDIT_POLICY, encoding="utf-8")
    extra = [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log}",
        "--audit-log-mode=blocking",
    ]
    with ApiServer(extra_args=extra, controller_manager=False) as server:
        install_crd(server, conversion_webhook)
        yield Audited(server, log)


# -- the RBAC installed, and what it grants --------------------------------------------------


def overlay_rbac(overlay: str) -> list[dict[str, Any]]:
    """The RBAC objects of the rendered overlay (``kubectl kustomize``); where the test
    environment has no kubectl yet, the overlay's generated rbac.yaml, which the overlay
    includes unchanged (test_deploy_overlays)."""
    try:
        return rendered(overlay, RBAC_KINDS)
    except MissingBinariesError:
        path = DEPLOY / "overlays" / overlay / "rbac.yaml"
        return [d for d in yaml.safe_load_all(path.read_text()) if d]


def install(server: ApiServer, overlay: str, namespace: str, tmp: Path) -> list[Permission]:
    """Install ``overlay``'s RBAC for the account in ``namespace``; every permission it
    grants there, as installed (the Role's namespace is ``namespace``)."""
    documents = overlay_rbac(overlay)
    path = tmp / f"{overlay}-rbac.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    saved = test_configmirror_rbac.RBAC_FILE
    test_configmirror_rbac.RBAC_FILE = path
    try:
        user = test_configmirror_rbac.install_rbac(server, namespace, secrets.token_hex(4))
    finally:
        test_configmirror_rbac.RBAC_FILE = saved
    wait_until_allowed(server, user, namespace)
    granted = []
    for doc in documents:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = namespace if doc["kind"] == "Role" else None
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for name in rule.get("resourceNames") or [None]:
                        for verb in rule["verbs"]:
                            granted.append(Permission(verb, group, resource, scope, name))
    return granted


# -- the audit log ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Audit:
    verb: str
    group: str
    resource: str  # with /subresource
    namespace: str | None
    name: str | None
    code: int
    uri: str


def audit_of(log: Path, user: str, since: float) -> list[Audit]:
    """Every request of ``user`` received after ``since`` (wall clock), once each."""
    found: dict[str, Audit] = {}
    with log.open(encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            if event["user"]["username"] != user:
                continue
            stamp = event["requestReceivedTimestamp"].replace("Z", "+00:00")
            if datetime.datetime.fromisoformat(stamp).timestamp() < since:
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "")
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            code = (event.get("responseStatus") or {}).get("code", 0)
            previous = found.get(event["auditID"])
            found[event["auditID"]] = Audit(
                event["verb"],
                ref.get("apiGroup", ""),
                resource,
                ref.get("namespace"),
                ref.get("name"),
                code or (previous.code if previous else 0),
                event["requestURI"],
            )
    return list(found.values())


def uses(audit: Audit, permission: Permission) -> bool:
    if (audit.group, audit.resource) != (permission.group, permission.resource):
        return False
    if permission.namespace is not None and audit.namespace != permission.namespace:
        return False
    if permission.name is not None and audit.name != permission.name:
        return False
    if audit.verb == permission.verb:
        return True
    # A server-side apply that created its object was authorized as create too.
    return permission.verb == "create" and audit.verb == "patch" and audit.code == 201


def assert_exact(audits: Sequence[Audit], granted: Sequence[Permission]) -> None:
    assert granted, "the overlay grants nothing"
    print(f"{len(audits)} requests; permissions used:")
    for p in granted:
        print(f"  {p.describe()}: {sum(uses(a, p) for a in audits)}")
    denied = [a for a in audits if a.code == 403]
    assert denied == [], f"requests denied to the operator: {denied}"
    unused = [p.describe() for p in granted if not any(uses(a, p) for a in audits)]
    assert unused == [], f"generated permissions never used: {unused}"


# -- the operator's operations ---------------------------------------------------------------


@dataclass
class Tenant:
    home: str
    targets: list[str]


async def mirror_operations(server: ApiServer, client: Client, tenant: Tenant) -> None:
    """What the controller does, driven through the admin ``client``: Events (and a
    series update, when a target is refused again), the finalizer, copies created, read,
    updated and deleted, a refused target then accepted, the status, and the author
    re-checked with access reviews."""
    home, targets = tenant.home, tenant.targets
    refusing = targets[-1]
    accept_mirrors(server, refusing, accept=False)
    author = author_value(UserInfo("admin", groups=("system:masters",)))
    body = mirror("m", "settings", targets)
    body["metadata"]["annotations"] = {AUTHOR_ANNOTATION: author}
    await client.create(CONFIGMIRRORS, body, namespace=home)

    async def event(reason: str, series: bool) -> bool:
        events = [e async for e in client.list(EVENTS, namespace=home)]
        return any(e.get("reason") == reason and bool(e.get("series")) is series for e in events)

    await eventually(lambda: event("SourceNotFound", False), what="the SourceNotFound Event")
    # A second mirror, into the refusing namespace only, writes no copy: pointed at an
    # existing source and back at the missing one, its Ready condition goes back to
    # SourceNotFound and the same Event recurs, written as its series (a PATCH).
    await client.create(CONFIGMIRRORS, mirror("solo", "solo", [refusing]), namespace=home)
    await client.create(CONFIGMAPS, configmap("other", {"a": "1"}), namespace=home)
    # The reconcile compares with the cached status, which may lag its own write by a
    # moment (then no Event is recorded): flip again until the series appears.
    for _ in range(5):
        for source in ("other", "solo"):
            await client.patch(CONFIGMIRRORS, "solo", {"spec": {"source": source}}, namespace=home)
            on = functools.partial(solo_reason, client, home, source)
            await eventually(on, what=f"solo on {source}")
        with trio.move_on_after(5):
            while not await event("SourceNotFound", True):
                await trio.sleep(0.2)
        if await event("SourceNotFound", True):
            break
    assert await event("SourceNotFound", True), "the SourceNotFound Event never recurred"
    await client.delete(CONFIGMIRRORS, "solo", namespace=home)
    await client.create(CONFIGMAPS, configmap("settings", {"a": "1"}), namespace=home)

    async def copies(data: dict[str, str], where: Sequence[str]) -> bool:
        found = [await get_or_none(client, CONFIGMAPS, "settings", t) for t in where]
        return all(c is not None and c.get("data") == data for c in found)

    await eventually(lambda: copies({"a": "1"}, targets[:-1]), what="copies created")
    source = await client.get(CONFIGMAPS, "settings", namespace=home)
    source["data"] = {"a": "2"}
    await client.replace(CONFIGMAPS, source, namespace=home)
    await eventually(lambda: copies({"a": "2"}, targets[:-1]), what="copies updated")
    accept_mirrors(server, refusing)
    await eventually(lambda: copies({"a": "2"}, targets), what="the copy once accepted")
    await client.delete(CONFIGMIRRORS, "m", namespace=home)

    async def gone() -> bool:
        return await get_or_none(client, CONFIGMIRRORS, "m", home) is None

    await eventually(gone, what="the finalizer removed after the cleanup")
    assert [await get_or_none(client, CONFIGMAPS, "settings", t) for t in targets] == [None] * len(
        targets
    )


async def solo_reason(client: Client, home: str, source: str) -> bool:
    """Whether the mirror ``solo``'s Ready condition is the one of ``source``."""
    found = await get_or_none(client, CONFIGMIRRORS, "solo", home)
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    reasons = {c.get("reason") for c in conditions if c.get("type") == "Ready"}
    return reasons == {"TargetNotAllowed" if source == "other" else "SourceNotFound"}


def tenant(server: ApiServer) -> Tenant:
    home = server.create_namespace(prefix="audit-home")
    targets = [server.create_namespace(prefix="audit-target") for _ in range(2)]
    for target in targets:
        accept_mirrors(server, target)
    return Tenant(home, targets)


async def run_through(
    server: ApiServer,
    client: Client,
    sa_client: Client,
    options: OperatorOptions,
    *,
    registered: bool = False,
) -> None:
    operator = ConfigMirrorOperator(sa_client, options)
    manager = operator.manager
    # Series updates (an Event's PATCH) every second instead of every minute.
    manager.events.machine = EventMachine(manager.name, manager.identity, flush_interval=1.0)
    async with operator, running_manager(operator.manager, timeout=30):
        assert operator.manager.permission_problem is None
        if registered:  # self-managed: the webhooks are registered before mirrors are made
            await eventually(lambda: webhooks_registered(client, operator), what="registration")
        await mirror_operations(server, client, tenant(server))


async def test_the_cert_manager_and_sharded_rbac_is_used_exactly(
    audited: Audited, tmp_path: Path
) -> None:
    """The cert-manager overlay's RBAC (the sharded overlay's too): a leader-elected
    replica, then a sharded one, use every permission and are never denied."""
    server = audited.server
    namespace = server.create_namespace(prefix="audit-cm")
    granted = install(server, "cert-manager", namespace, tmp_path)
    started = time.time()
    (tmp_path / "sa").mkdir()
    admin = Client.from_kubeconfig(str(server.kubeconfig_path))
    async with admin, service_account_client(server, namespace, tmp_path / "sa") as sa:
        election = LeaderElectionConfig("kubemoon-configmirror", namespace, identity="le")
        await run_through(server, admin, sa, OperatorOptions(leader_election=election))
        sharding = ShardingConfig(identity="shard-0", namespace=namespace)
        await run_through(server, admin, sa, OperatorOptions(sharding=sharding))
    user = f"system:serviceaccount:{namespace}:configmirror"
    assert_exact(audit_of(audited.log, user, started), granted)


async def webhooks_registered(client: Client, operator: ConfigMirrorOperator) -> bool:
    """The leader registered both configurations and the CRD's conversion, at itself."""
    webhooks = operator.webhooks
    assert webhooks is not None
    if not webhooks.server.serving:
        return False
    for resource, name in ((VALIDATING, "validating"), (MUTATING, "mutating")):
        try:
            await client.get(resource, f"configmirror-{name}")
        except NotFound:
            return False
    crd = await client.get(CRDS, "configmirrors.kubemoon.dev")
    config = crd["spec"]["conversion"].get("webhook", {}).get("clientConfig", {})
    return str(config.get("url", "")).startswith(webhooks.server.url)


async def test_the_self_managed_rbac_is_used_exactly(audited: Audited, tmp_path: Path) -> None:
    """The self-managed overlay's RBAC: a leader-elected replica keeping its certificate
    Secret and registering its webhooks and the CRD's conversion, then a second start
    finding the Secret emptied and a configuration edited by hand (it reads them, puts
    the Secret back and patches the configuration), use every permission and are never
    denied."""
    server = audited.server
    namespace = server.create_namespace(prefix="audit-self")
    granted = install(server, "self-managed", namespace, tmp_path)
    started = time.time()
    (tmp_path / "sa").mkdir()
    admin = Client.from_kubeconfig(str(server.kubeconfig_path))
    options = OperatorOptions(
        leader_election=LeaderElectionConfig("kubemoon-configmirror", namespace, identity="le"),
        webhook_address=("127.0.0.1", 0),
        webhook_self_managed=True,
        webhook_advertise_host="127.0.0.1",
        webhook_secret=(namespace, "configmirror-webhook-certs"),
    )
    async with admin, service_account_client(server, namespace, tmp_path / "sa") as sa:
        await run_through(server, admin, sa, options, registered=True)
        # What a second start must repair: an emptied Secret, an edited configuration.
        secret = await admin.get(SECRETS, "configmirror-webhook-certs", namespace=namespace)
        secret["data"] = {}
        await admin.replace(SECRETS, secret, namespace=namespace)
        edit = [{"op": "replace", "path": "/webhooks/0/timeoutSeconds", "value": 29}]
        await admin.patch(VALIDATING, "configmirror-validating", edit, patch_type=PatchType.JSON)
        await run_through(server, admin, sa, options, registered=True)
        for resource, name in ((VALIDATING, "validating"), (MUTATING, "mutating")):
            await admin.delete(resource, f"configmirror-{name}")
    user = f"system:serviceaccount:{namespace}:configmirror"
    assert_exact(audit_of(audited.log, user, started), granted)


def test_the_audit_rule_fails_on_an_unused_or_a_denied_permission() -> None:
    """What the two tests above assert, on made-up audit records: a permission no request
    used, a request answered 403, a Role permission used only in another namespace."""
    get = Permission("get", "", "configmaps", None)
    create = Permission("create", ADMISSION, "validatingwebhookconfigurations", None)
    leases = Permission("update", "coordination.k8s.io", "leases", "ops")
    read = Audit("get", "", "configmaps", "t", "x", 200, "/api/v1/namespaces/t/configmaps/x")
    applied = Audit("patch", ADMISSION, "validatingwebhookconfigurations", None, "v", 201, "/")
    elsewhere = Audit("update", "coordination.k8s.io", "leases", "other", "l", 200, "/")
    assert_exact([read, applied], [get, create])  # an apply that created counts as create
    with pytest.raises(AssertionError, match="never used"):
        assert_exact([read], [get, create])
    with pytest.raises(AssertionError, match="never used"):
        assert_exact([elsewhere], [leases])
    with pytest.raises(AssertionError, match="denied"):
        assert_exact([read, Audit("list", "", "secrets", None, None, 403, "/")], [get])
