"""The runtime's narrow interfaces: option objects, a builder on any Cluster, runnables.

The builder takes a :class:`~kubemoon_trio.Cluster` (not a Manager), the webhook settings are
one :class:`~kubemoon_trio.WebhookOptions` (the keyword forms build it), and the manager runs
its controllers and webhooks as :class:`~kubemoon_trio.Runnable` s.
"""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry

from kubemoon_core import GroupVersionResource, Reconciled
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.lowlevel import FailureReporter
from kubemoon_core.webhooks import AdmissionRequest, AdmissionResponse, WebhookDeclarations
from kubemoon_trio import (
    Client,
    ControllerBuilder,
    EventRecorder,
    LeaderElection,
    Manager,
    ReconcileContext,
    RuntimeController,
    SharedInformers,
    WebhookManager,
    WebhookOptions,
    WebhookServerOptions,
)

CM = GroupVersionResource("", "v1", "configmaps")
SERVER = "https://127.0.0.1:6443"


def hooks() -> WebhookDeclarations:
    declared = WebhookDeclarations("interfaces")

    @declared.validating("/v", CM)
    def allow(request: AdmissionRequest) -> AdmissionResponse:
        return AdmissionResponse.allow()

    return declared


async def test_the_webhook_keywords_and_the_options_object_configure_alike() -> None:
    options = WebhookOptions(
        service=("ops", "hooks"),
        service_port=8443,
        refresh=5.0,
        resync=30.0,
        server=WebhookServerOptions(
            host="127.0.0.1", port=0, max_handshakes=7, request_timeout=12.0, handler_threads=2
        ),
    )
    async with Client(ClientConfig(server=SERVER)) as client:
        by_keywords = Manager(client).serve_webhooks(
            hooks(),
            service=("ops", "hooks"),
            service_port=8443,
            refresh=5.0,
            resync=30.0,
            host="127.0.0.1",
            port=0,
            max_handshakes=7,
            request_timeout=12.0,
            handler_threads=2,
        )
        by_options = Manager(client).serve_webhooks(hooks(), options=options)
        for webhooks in (by_keywords, by_options):
            assert webhooks.options == options
            assert webhooks.secret == ("ops", "interfaces-webhook-certs")
            assert webhooks.endpoint().port == 8443
            assert (webhooks.refresh, webhooks.resync) == (5.0, 30.0)
            assert webhooks.server.host == "127.0.0.1"
            assert webhooks.server.max_handshakes == 7
            assert webhooks.server.request_timeout == 12.0
        # The WebhookManager's own keyword form builds the same options.
        direct = WebhookManager(
            Manager(client),
            hooks(),
            service=("ops", "hooks"),
            service_port=8443,
            refresh=5.0,
            resync=30.0,
            host="127.0.0.1",
            port=0,
            max_handshakes=7,
            request_timeout=12.0,
            handler_threads=2,
        )
        assert direct.options == options


async def test_mixed_or_unknown_webhook_settings_are_refused_by_name() -> None:
    async with Client(ClientConfig(server=SERVER)) as client:
        with pytest.raises(LocalProtocolError, match="options or keywords, not both"):
            Manager(client).serve_webhooks(hooks(), port=1, options=WebhookOptions())
        with pytest.raises(LocalProtocolError, match=r"not both \(got port\)"):
            WebhookManager(Manager(client), hooks(), WebhookOptions(), port=1)
        with pytest.raises(LocalProtocolError, match="unknown webhook option.*: prot"):
            WebhookManager(Manager(client), hooks(), prot=1)
    with pytest.raises(LocalProtocolError, match="unknown webhook option.*: bogus, prot"):
        WebhookOptions.from_keywords(prot=1, bogus=2, port=3)
    assert WebhookOptions.from_keywords(port=3, secret=("a", "b")) == WebhookOptions(
        secret=("a", "b"), server=WebhookServerOptions(port=3)
    )


class _SmallCluster:
    """A host that is no Manager: the Cluster interface and nothing more."""

    def __init__(self, client: Client) -> None:
        self.name = "small"
        self.client = client
        self.informers = SharedInformers(client, rng=random.Random(1))
        self.events = EventRecorder(client, "small", "small-0")
        self.election: LeaderElection | None = None
        self.lease_name: str | None = None
        self.failures = FailureReporter()
        self.registry = CollectorRegistry(auto_describe=False)


async def test_a_builder_builds_on_any_cluster_and_registers_through_its_callback() -> None:
    async def reconcile(ctx: ReconcileContext[object]) -> Reconciled:
        return Reconciled()

    async with Client(ClientConfig(server=SERVER)) as client:
        cluster = _SmallCluster(client)
        built: list[RuntimeController] = []
        controller = (
            ControllerBuilder(cluster, "mirror", CM, kind="ConfigMap", register=built.append)
            .sharded()
            .complete(reconcile)
        )
        assert built == [controller]
        assert controller.cluster is cluster
        assert [i.resource for i in cluster.informers] == [CM]
        # As a runnable: gated on leadership, sharded, its problems and status its own.
        assert controller.needs_leader_election is True
        assert controller.readiness_problems() == []
        status = controller.shard_status()
        assert status is not None and status.controller == "mirror"
        assert controller.readiness_notes()[0].startswith("controller mirror: sharded as ")
        # Without a callback the builder only builds.
        alone = ControllerBuilder(cluster, "alone", CM).complete(reconcile)
        assert alone.shard_status() is None and alone.readiness_notes() == []


async def test_the_manager_runs_controllers_then_webhooks_as_runnables() -> None:
    async def reconcile(ctx: ReconcileContext[object]) -> Reconciled:
        return Reconciled()

    async with Client(ClientConfig(server=SERVER)) as client:
        manager = Manager(client)
        first = manager.controller("first", CM).complete(reconcile)
        webhooks = manager.serve_webhooks(hooks())
        assert manager.runnables == [first, webhooks]
        assert webhooks.needs_leader_election is False
        assert manager.readiness_problems() == [
            "configmaps: cache not synced",
            "webhooks: no serving certificate yet",
        ]
