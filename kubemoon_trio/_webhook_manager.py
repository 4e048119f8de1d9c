"""Declared webhooks, served on every replica and registered by the leader.

Rules:

- Every replica serves the declarations (:meth:`WebhookDeclarations.app`) with the same
  certificate: by default the one in the certificate Secret, re-read every ``refresh``
  seconds and swapped in memory without a restart; with ``cert_dir`` the files there
  (a cert-manager Secret), reloaded when they change. The server starts once a
  certificate is loaded.
- Only the leader writes: it runs the pure :class:`~kubemoon_core.webhooks.CertificatePlanner`
  on the Secret (create, renew, rotate with an overlap), then server-side applies the
  configurations derived from the declarations (field manager: the Manager's name), and
  records in the Secret that the bundle is published -- the planner waits ``propagation``
  after that before any certificate signed by a new CA is served. It repeats every
  ``resync`` seconds (a configuration deleted by hand comes back) or when a certificate
  step is due.
- A failed call (missing RBAC above all) goes through the Manager's failure reporter:
  logged at ERROR with the verb and resource for 401/403, and a ``/readyz`` reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubemoon_core import ApiError, GroupVersionResource, KubeMoonError, PatchType, WriteOptions
from kubemoon_core.errors import Conflict, LocalProtocolError, NotFound
from kubemoon_core.lowlevel import DEFAULT_GATE_MARGIN, WriteGate
from kubemoon_core.webhooks import (
    CertificateAction,
    CertificatePlanner,
    WebhookConfigurations,
    WebhookDeclarations,
    WebhookEndpoint,
    webhook_drift,
)
from kubemoon_io import (
    CertificateMaterial,
    SendGuard,
    ServingCertificate,
    gate_guard,
    gated_writes,
    require_cryptography,
)

from . import _backend
from ._options import WebhookOptions
from ._runtime_protocols import Cluster
from ._webhook_server import WebhookServer

__all__ = ["WebhookManager"]

logger = logging.getLogger("kubemoon.webhooks")

SECRETS = GroupVersionResource("", "v1", "secrets")
VALIDATING = GroupVersionResource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"
)
MUTATING = GroupVersionResource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"
)
CRDS = GroupVersionResource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
# How many certificate steps one pass may take (create, then nothing: normally one or two).
_MAX_STEPS = 6


class WebhookManager:
    """The declared webhooks of a :class:`Manager` (made by :meth:`Manager.serve_webhooks`).

    ``service`` is ``(namespace, name)`` of the Service in front of the pods (in a
    cluster, port ``service_port``); without it the API server is sent to
    ``https://<advertise_host or host>:<bound port>`` (a laptop). ``secret`` is
    ``(namespace, name)`` of the certificate Secret (default: ``<name>-webhook-certs`` in
    the Service's namespace); ``cert_dir`` (``tls.crt``, ``tls.key``, optional ``ca.crt``)
    replaces it. ``policy`` sets validity, renewal and rotation times; ``clock`` gives
    wall-clock epoch seconds (tests inject one). ``client_ca_file`` (mutual TLS: only
    clients with a certificate that CA signed, such as the API server, are answered) and
    the server's limits (``max_connections``, ``max_handshakes``, ``first_request_timeout``,
    ``request_timeout``, ``handler_threads``, ``inline_body_size``) go to the
    :class:`WebhookServer`, with its defaults.

    Those settings are one :class:`WebhookOptions` (``options``; its ``server`` is a
    :class:`WebhookServerOptions`); the flat keywords above still work and build it. It
    uses only the :class:`~kubemoon_trio.Cluster` interface of what
    hosts it, and the manager runs it as a
    :class:`~kubemoon_trio.Runnable` on every replica.
    """

    # Served on every replica, leader or not: the API server calls any.
    needs_leader_election = False

    def __init__(
        self,
        cluster: Cluster,
        declarations: WebhookDeclarations,
        options: WebhookOptions | None = None,
        *,
        clock: Callable[[], float] | None = None,
        **keywords: Any,
    ) -> None:
        if options is None:
            options = WebhookOptions.from_keywords(**keywords)
        elif keywords:
            raise LocalProtocolError(
                f"pass WebhookOptions or keywords, not both (got {', '.join(sorted(keywords))})"
            )
        self.options = options
        served = options.server
        host = served.host
        service, secret = options.service, options.secret
        refresh = options.refresh
        cert_dir = options.cert_dir
        self.cluster = cluster
        self.declarations = declarations
        self.service = service
        self.service_port = options.service_port
        self.advertise_host = options.advertise_host or ("127.0.0.1" if host == "0.0.0.0" else host)
        self.cert_dir = Path(cert_dir) if cert_dir is not None else None
        if secret is None and self.cert_dir is None:
            namespace = service[0] if service else "default"
            secret = (namespace, f"{declarations.name}-webhook-certs")
        self.secret = None if self.cert_dir is not None else secret
        if self.secret is not None:
            require_cryptography()  # fail now, not in the leader's first pass
        self.planner = CertificatePlanner(options.policy)
        if self.planner.policy.overlap <= refresh:
            raise LocalProtocolError(
                "the certificate overlap must be longer than the refresh interval, so every "
                "replica serves the new certificate before the old CA leaves the bundle"
            )
        self.refresh = refresh
        self.resync = options.resync
        self._clock = clock or _backend.wall_time
        self.certificate = ServingCertificate()
        files = self.cert_dir is not None
        self.server = WebhookServer(
            declarations.app(),
            cert_file=self.cert_dir / "tls.crt" if self.cert_dir is not None else None,
            key_file=self.cert_dir / "tls.key" if self.cert_dir is not None else None,
            certificate=None if files else self.certificate,
            client_ca_file=served.client_ca_file,
            host=host,
            port=served.port,
            max_connections=served.max_connections,
            max_handshakes=served.max_handshakes,
            first_request_timeout=served.first_request_timeout,
            request_timeout=served.request_timeout,
            handler_threads=served.handler_threads,
            inline_body_size=served.inline_body_size,
            registry=cluster.registry,
        )
        self._refusal: str | None = None  # why the Secret's pair was last refused
        self._loaded = _backend.Event()
        self._serving = _backend.Event()
        if self.cert_dir is not None:
            self._loaded.set()
        self.applied = 0  # passes that applied every configuration

    def __repr__(self) -> str:
        return f"<WebhookManager {self.declarations.name} {self.server!r}>"

    # -- what is registered ----------------------------------------------------------------

    def endpoint(self) -> WebhookEndpoint:
        """Where the API server reaches the webhooks (the URL needs the bound port)."""
        if self.service is not None:
            return WebhookEndpoint(service=self.service, port=self.service_port)
        host = self.advertise_host
        host = f"[{host}]" if ":" in host else host
        return WebhookEndpoint(url=f"https://{host}:{self.server.port}")

    def configurations(self, ca_bundle: bytes | None) -> WebhookConfigurations:
        """The configurations the leader applies with ``ca_bundle``."""
        return self.declarations.configurations(self.endpoint(), ca_bundle=ca_bundle)

    @property
    def name(self) -> str:
        """The declarations' name."""
        return self.declarations.name

    def problems(self) -> list[str]:
        """Why the webhooks are not ready (``/readyz``)."""
        if not self._loaded.is_set():
            return ["webhooks: no serving certificate yet"]
        if not self._serving.is_set():
            return ["webhooks: not serving yet"]
        return []

    def readiness_problems(self) -> list[str]:
        """Why the webhooks are not ready (``/readyz``), as a runnable."""
        return self.problems()

    def readiness_notes(self) -> list[str]:
        """Nothing to explain beyond the problems."""
        return []

    # -- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve, refresh the certificate, and lead when leading; until cancelled."""
        async with _backend.TaskGroup() as tasks:
            if self.secret is not None:
                tasks.start_soon(self._refresh_loop)
            tasks.start_soon(self._lead_loop)
            await self._loaded.wait()
            await tasks.start(self.server.serve)
            self._serving.set()
            logger.info("webhooks served at %s", self.server.url)

    async def _refresh_loop(self) -> None:
        """Every replica: load the Secret's certificate when it changed."""
        assert self.secret is not None
        namespace, name = self.secret
        while True:
            try:
                found = await self.cluster.client.get(SECRETS, name, namespace=namespace)
            except NotFound:
                found = None
            except KubeMoonError as exc:
                self._failed("get", "secrets", exc, namespace)
                found = None
            else:
                self._succeeded("get", "secrets")
            if found is not None:
                self._load(CertificateMaterial.from_secret(found))
            await _backend.sleep(self.refresh)

    def _load(self, material: CertificateMaterial) -> None:
        if not material.cert or not material.key:
            return
        try:
            changed = self.certificate.update(material.cert, material.key)
        except LocalProtocolError as exc:
            if str(exc) != self._refusal:  # once per refused pair, not every refresh
                self._refusal = str(exc)
                logger.warning(
                    "webhook certificate from the Secret not loaded, serving the previous one: %s",
                    exc,
                )
            return
        self._refusal = None
        if changed:
            logger.info("webhook serving certificate loaded (reload %d)", self.certificate.reloads)
        self._loaded.set()

    def _leadership_guard(self) -> SendGuard | None:
        """The leader pass's writes are gated by the leadership, as a reconcile's are."""
        election = self.cluster.election
        if election is None:
            return None
        elector = election.elector
        gate = WriteGate(
            [(f"leadership of the Lease {elector.lease}", elector.valid_until)],
            margin=min(DEFAULT_GATE_MARGIN, elector.renew_deadline / 10),
        )
        return gate_guard(gate, _backend.current_time)

    async def _lead_loop(self) -> None:
        """The leader: certificates, then configurations, every ``resync`` or when due."""
        election = self.cluster.election
        # Nothing is written before the start-up permission check passed (a Manager that
        # does not elect a leader starts this loop at once).
        await self.cluster.wait_permitted()
        while True:
            if election is not None and not election.is_leader:
                await election.wait_leading()
            try:
                with gated_writes(self._leadership_guard()):
                    next_check = await self.reconcile_once()
            except KubeMoonError as exc:  # never lose the manager over one pass (AuthorityLost too)
                logger.error("webhooks: the leader's pass failed: %s", exc)
                next_check = self._clock() + min(self.resync, 5.0)
            delay = self.resync
            if next_check is not None:
                delay = min(delay, max(0.0, next_check - self._clock()))
            await _backend.sleep(delay)

    async def reconcile_once(self) -> float | None:
        """One leader pass; returns when a certificate step is next due (epoch seconds)."""
        next_check: float | None = None
        material: CertificateMaterial | None = None
        secret: dict[str, Any] | None = None
        bundle: bytes | None = None
        if self.secret is not None:
            found = await self._certificates()
            if found is None:
                return self._clock() + min(self.refresh, 1.0)  # try again soon
            material, secret, next_check = found
            bundle = material.bundle
        elif self.cert_dir is not None:
            ca_file = self.cert_dir / "ca.crt"
            bundle = ca_file.read_bytes() if ca_file.is_file() else None
        await self._serving.wait()
        if not await self._apply(self.configurations(bundle)):
            retry = self._clock() + min(self.resync, 5.0)
            return retry if next_check is None else min(next_check, retry)
        self.applied += 1
        if material is not None and material.published != material.bundle_digest:
            published = material.published_now(self._clock())
            if await self._write(published, secret):
                return self._clock()  # re-plan at once: the switch may now be timed
        return next_check

    async def _certificates(
        self,
    ) -> tuple[CertificateMaterial, dict[str, Any] | None, float | None] | None:
        """Plan and perform certificate steps until none is due; the material, its
        Secret as stored, and when to look again (None: the API failed)."""
        assert self.secret is not None
        namespace, name = self.secret
        hosts = self.endpoint().hosts if self.service else self._local_hosts()
        for _ in range(_MAX_STEPS):
            try:
                secret: dict[str, Any] | None = await self.cluster.client.get(
                    SECRETS, name, namespace=namespace
                )
            except NotFound:
                secret = None
            except KubeMoonError as exc:
                self._failed("get", "secrets", exc, namespace)
                return None
            material = CertificateMaterial.from_secret(secret)
            now = self._clock()
            plan = self.planner.plan(material.state(), hosts, now)
            if plan.action is CertificateAction.NONE:
                self._load(material)
                return material, secret, plan.next_check
            logger.info(
                "webhook certificates: %s (%s)",
                plan.action.value,
                plan.reason,
                extra={"secret": f"{namespace}/{name}"},
            )
            new = material.perform(
                plan,
                hosts=hosts,
                policy=self.planner.policy,
                now=now,
                common_name=f"{self.declarations.name}-webhook",
            )
            if not await self._write(new, secret):
                return None
        return None

    def _local_hosts(self) -> tuple[str, ...]:
        # The port is not part of a certificate: known before the server is bound.
        return WebhookEndpoint(url=f"https://{_bracket(self.advertise_host)}:1").hosts

    async def _write(self, material: CertificateMaterial, secret: dict[str, Any] | None) -> bool:
        """Create or replace the Secret (conditional on its resourceVersion)."""
        assert self.secret is not None
        namespace, name = self.secret
        body = material.secret(namespace, name)
        client = self.cluster.client
        try:
            if secret is None:
                await client.create(SECRETS, body, namespace=namespace)
                verb = "create"
            else:
                metadata = {
                    k: v for k, v in secret.get("metadata", {}).items() if k != "managedFields"
                }
                annotations = dict(metadata.get("annotations") or {})
                annotations.update(body["metadata"]["annotations"])
                body["metadata"] = {**metadata, "annotations": annotations}
                verb = "update"
                await client.replace(SECRETS, body, namespace=namespace)
        except Conflict:
            return False  # someone wrote first: read again
        except KubeMoonError as exc:
            self._failed("create" if secret is None else "update", "secrets", exc, namespace)
            return False
        self._succeeded(verb, "secrets")
        return True

    async def _apply(self, configs: WebhookConfigurations) -> bool:
        client = self.cluster.client
        field_manager = self.cluster.name
        ok = True
        pairs = (
            (VALIDATING, configs.validating, "validating"),
            (MUTATING, configs.mutating, "mutating"),
        )
        for resource, wanted, suffix in pairs:
            name = f"{self.declarations.name}-{suffix}"
            body = wanted
            if body is None:
                # No webhook of this kind any more: empty our entries if the object exists.
                try:
                    await client.get(resource, name)
                except NotFound:
                    continue
                except KubeMoonError as exc:
                    ok = self._failed("get", resource.resource, exc)
                    continue
                kind = (
                    "ValidatingWebhookConfiguration"
                    if suffix == "validating"
                    else ("MutatingWebhookConfiguration")
                )
                body = {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": kind,
                    "metadata": {"name": name},
                    "webhooks": [],
                }
                ok = await self._apply_one(resource, body, field_manager) and ok
                continue
            ok = await self._converge(resource, body, field_manager) and ok
        for crd in configs.conversions:
            ok = await self._clear_other_client_config(crd, field_manager) and ok
            ok = await self._apply_one(CRDS, crd, field_manager) and ok
        return ok

    async def _converge(
        self, resource: GroupVersionResource, body: dict[str, Any], field_manager: str
    ) -> bool:
        """Make the live configuration what ``body`` declares, field for field.

        Server-side apply leaves alone every field the body does not set, so a
        ``matchConditions`` or a selector added by hand would survive it and switch the
        webhook off for the requests it excludes: a drifted object is put back whole (a
        conditional PUT of the declared ``webhooks``), with a WARNING naming the fields.
        """
        client = self.cluster.client
        name = body["metadata"]["name"]
        unread: KubeMoonError | None = None
        try:
            live: dict[str, Any] | None = await client.get(resource, name)
        except NotFound:
            live = None
        except KubeMoonError as exc:  # apply anyway; the apply's own failure says more
            live, unread = None, exc
        if live is not None:
            drift = webhook_drift(body, live)
            if drift:
                logger.warning(
                    "webhooks: %s %s was edited outside its declaration (%s); putting it back",
                    body["kind"],
                    name,
                    ", ".join(drift[:20]) + (" ..." if len(drift) > 20 else ""),
                )
                # A JSON patch (the ``patch`` verb the RBAC already grants), conditional on
                # the version read: a concurrent edit fails the test and the next pass retries.
                version = (live.get("metadata") or {}).get("resourceVersion", "")
                fix = [
                    {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                    {"op": "replace", "path": "/webhooks", "value": body["webhooks"]},
                ]
                try:
                    await client.patch(
                        resource,
                        name,
                        fix,
                        patch_type=PatchType.JSON,
                        options=WriteOptions(field_manager=field_manager),
                    )
                except KubeMoonError as exc:
                    return self._failed("patch", resource.resource, exc)
        if not await self._apply_one(resource, body, field_manager):
            return False
        return True if unread is None else self._failed("get", resource.resource, unread)

    async def _clear_other_client_config(self, crd: dict[str, Any], field_manager: str) -> bool:
        """A CRD installed with a ``service`` (or ``url``) its creator owns keeps it under
        server-side apply, and both together are invalid: remove the other one first."""
        ours = crd["spec"]["conversion"]["webhook"]["clientConfig"]
        other = "service" if "url" in ours else "url"
        name = crd["metadata"]["name"]
        try:
            live = await self.cluster.client.get(CRDS, name)
        except KubeMoonError as exc:
            return self._failed("get", CRDS.resource, exc)
        conversion = live.get("spec", {}).get("conversion") or {}
        current = (conversion.get("webhook") or {}).get("clientConfig") or {}
        if other not in current:
            return True
        patch = {"spec": {"conversion": {"webhook": {"clientConfig": {other: None, **ours}}}}}
        try:
            await self.cluster.client.patch(
                CRDS, name, patch, options=WriteOptions(field_manager=field_manager)
            )
        except KubeMoonError as exc:
            return self._failed("patch", CRDS.resource, exc)
        return True

    async def _apply_one(
        self, resource: GroupVersionResource, body: dict[str, Any], field_manager: str
    ) -> bool:
        try:
            await self.cluster.client.apply(resource, body, field_manager=field_manager, force=True)
        except KubeMoonError as exc:
            return self._failed("patch", resource.resource, exc)
        self._succeeded("patch", resource.resource)
        return True

    # -- failures ----------------------------------------------------------------------------

    def _failed(
        self, verb: str, resource: str, error: BaseException, namespace: str | None = None
    ) -> bool:
        now = _backend.current_time()
        report = self.cluster.failures.failed(
            f"webhooks {verb} {resource}", verb, resource, error, now=now, namespace=namespace
        )
        if report is not None:
            level = int(report.level)
            if isinstance(error, ApiError) and error.code in (401, 403):
                level = logging.ERROR  # the operator cannot work without this permission
            logger.log(level, "webhooks: %s", report.message)
        return False

    def _succeeded(self, verb: str, resource: str) -> None:
        report = self.cluster.failures.succeeded(
            f"webhooks {verb} {resource}", now=_backend.current_time()
        )
        if report is not None:
            logger.log(int(report.level), "webhooks: %s", report.message)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
