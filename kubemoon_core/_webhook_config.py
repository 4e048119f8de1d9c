"""Webhooks declared once: the declarations and the configurations derived from them.

The certificate lifecycle of the server that serves them is planned in
``kubemoon_core._webhook_certificates``.

Rules:

- A :class:`WebhookDeclarations` holds every webhook of an operator with its handler. The
  :class:`WebhookApp` that serves them and the ``ValidatingWebhookConfiguration``,
  ``MutatingWebhookConfiguration`` and CRD ``spec.conversion`` that register them are both
  derived from it, so the two never disagree.
- The configurations are server-side apply bodies: applying them as one field manager
  removes the entries of declarations that are gone (``webhooks`` is a map keyed by name).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ._conversion import Converter
from ._declare import DeclaredKind, resource_info
from ._errors import LocalProtocolError
from ._resources import GroupVersionResource
from ._webhook import DEFAULT_MAX_CONVERSION_BODY_SIZE, WebhookApp, WebhookKind
from ._webhook_typed import typed_handler

__all__ = [
    "WebhookConfigurations",
    "WebhookDeclaration",
    "WebhookDeclarations",
    "WebhookEndpoint",
    "webhook_drift",
]

_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT", "*"})
_FAILURE_POLICIES = frozenset({"Fail", "Ignore"})
_SIDE_EFFECTS = frozenset({"None", "NoneOnDryRun"})
_MATCH_POLICIES = frozenset({"Exact", "Equivalent"})
_REINVOCATION = frozenset({"Never", "IfNeeded"})
_SCOPES = frozenset({"*", "Cluster", "Namespaced"})
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_BASE_URL = re.compile(r"^https://[^/?#@\s]+(/[A-Za-z0-9._~/-]*)?$")
# What a path may hold: it goes into a URL and a Service reference unescaped.
_PATH = re.compile(r"^/[A-Za-z0-9._~/-]{0,255}$")
ADMISSION_GROUP = "admissionregistration.k8s.io"

H = TypeVar("H")


def _qualified(name: str) -> bool:
    labels = name.split(".")
    return (
        len(labels) >= 3 and len(name) <= 253 and all(_DNS_LABEL.match(label) for label in labels)
    )


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:63].strip("-") or "webhook"


@dataclass(frozen=True, slots=True)
class WebhookDeclaration:
    """One webhook, as the API server must know it.

    ``resources`` and ``operations`` make one rule per resource (its group and version);
    ``crd`` is the CustomResourceDefinition a conversion webhook converts. ``name`` is
    the fully qualified webhook name (at least three DNS labels). ``max_body_size`` is
    the served route's body limit in bytes (None: :class:`WebhookApp`'s default for the
    kind); it is not part of any configuration.
    """

    name: str
    path: str
    kind: WebhookKind
    resources: tuple[GroupVersionResource, ...] = ()
    operations: tuple[str, ...] = ("CREATE", "UPDATE")
    failure_policy: str = "Fail"
    side_effects: str = "None"
    timeout_seconds: int = 10
    namespace_selector: Mapping[str, Any] | None = None
    object_selector: Mapping[str, Any] | None = None
    match_policy: str = "Equivalent"
    reinvocation_policy: str = "Never"
    scope: str = "*"
    crd: str | None = None
    max_body_size: int | None = None

    def __post_init__(self) -> None:
        def bad(what: str) -> LocalProtocolError:
            return LocalProtocolError(f"webhook {self.name or self.path!r}: {what}")

        size = self.max_body_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise bad(f"max_body_size must be a positive integer, got {size!r}")

        if not _PATH.match(self.path) or "/../" in self.path + "/" or "//" in self.path:
            raise bad(
                "the path must start with '/' and hold only letters, digits and ._~/- "
                f"(no '..' segment), got {self.path!r}"
            )
        if not _qualified(self.name):
            raise bad("the name must be a fully qualified DNS name with at least three labels")
        if self.kind is WebhookKind.CONVERSION:
            if not self.crd or not _qualified(self.crd):
                raise bad("a conversion webhook needs crd='<plural>.<group>'")
            return
        if not self.resources:
            raise bad("an admission webhook needs at least one resource")
        if not self.operations or not set(self.operations) <= _OPERATIONS:
            raise bad(f"operations must be among {sorted(_OPERATIONS)}, got {self.operations}")
        checks = (
            (self.failure_policy, _FAILURE_POLICIES, "failure_policy"),
            (self.side_effects, _SIDE_EFFECTS, "side_effects"),
            (self.match_policy, _MATCH_POLICIES, "match_policy"),
            (self.reinvocation_policy, _REINVOCATION, "reinvocation_policy"),
            (self.scope, _SCOPES, "scope"),
        )
        for value, allowed, what in checks:
            if value not in allowed:
                raise bad(f"{what} must be one of {sorted(allowed)}, got {value!r}")
        if isinstance(self.timeout_seconds, bool) or not 1 <= self.timeout_seconds <= 30:
            raise bad(f"timeout_seconds must be 1 to 30, got {self.timeout_seconds!r}")
        for selector, what in (
            (self.namespace_selector, "namespace_selector"),
            (self.object_selector, "object_selector"),
        ):
            if selector is not None and not isinstance(selector, Mapping):
                raise bad(f"{what} must be a label selector mapping")


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """Where the API server reaches the webhooks: a Service in the cluster, or a URL.

    ``service`` is ``(namespace, name)`` with ``port`` (443 by default); ``url`` is the
    base ``https://host:port`` of a server outside the cluster (a laptop).
    """

    service: tuple[str, str] | None = None
    port: int = 443
    url: str | None = None

    def __post_init__(self) -> None:
        if (self.service is None) == (self.url is None):
            raise LocalProtocolError("a webhook endpoint is a service or a url, exactly one")
        if self.url is not None and not _BASE_URL.match(self.url):
            raise LocalProtocolError(
                f"a webhook url must be https://host[:port][/prefix] without a query, "
                f"fragment or user: {self.url!r}"
            )
        if self.service is not None and not all(self.service):
            raise LocalProtocolError("a webhook service needs a namespace and a name")
        if not 1 <= self.port <= 65535:
            raise LocalProtocolError(f"a webhook port must be 1 to 65535, got {self.port}")

    @property
    def hosts(self) -> tuple[str, ...]:
        """The names the serving certificate must carry."""
        if self.service is not None:
            namespace, name = self.service
            return (f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local")
        netloc = (self.url or "").removeprefix("https://").split("/", 1)[0]
        if netloc.startswith("[") and "]" in netloc:
            host = netloc[1 : netloc.index("]")]
        else:
            host = netloc.split(":", 1)[0]
        return (host,) if host == "localhost" else (host, "localhost")

    def client_config(self, path: str, ca_bundle: bytes | None) -> dict[str, Any]:
        """The ``clientConfig`` of a webhook served at ``path``."""
        config: dict[str, Any]
        if self.service is not None:
            namespace, name = self.service
            service = {"namespace": namespace, "name": name, "path": path, "port": self.port}
            config = {"service": service}
        else:
            config = {"url": f"{(self.url or '').rstrip('/')}{path}"}
        if ca_bundle:
            config["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
        return config


@dataclass(frozen=True, slots=True)
class WebhookConfigurations:
    """What the declarations register: each is a server-side apply body, or None.

    ``validating`` and ``mutating`` are the two webhook configurations (None when no webhook
    of that kind is declared); ``conversions`` patch each CRD's ``spec.conversion``.
    """

    validating: dict[str, Any] | None
    mutating: dict[str, Any] | None
    conversions: tuple[dict[str, Any], ...]

    def documents(self) -> list[dict[str, Any]]:
        """Every body, configurations first (for YAML output)."""
        found = [c for c in (self.validating, self.mutating) if c is not None]
        return [*found, *self.conversions]


@dataclass(frozen=True, slots=True)
class _Declared:
    declaration: WebhookDeclaration
    handler: Any


class WebhookDeclarations:
    """Every webhook of an operator, declared once with its handler.

    ``name`` names the configurations (``<name>-validating``, ``<name>-mutating``) and
    qualifies the default webhook names (``<path>.<name>.<domain>``). Register with the
    decorators :meth:`validating`, :meth:`mutating`, or :meth:`conversion`; then
    :meth:`app` serves them and :meth:`configurations` registers them.
    """

    def __init__(self, name: str, *, domain: str = "kubemoon.dev") -> None:
        if not _DNS_LABEL.match(name) or len(name) > 40:
            raise LocalProtocolError(f"webhooks name must be a short DNS label, got {name!r}")
        self.name = name
        self.domain = domain
        self._declared: dict[str, _Declared] = {}

    def __repr__(self) -> str:
        return f"<WebhookDeclarations {self.name} {sorted(self._declared)}>"

    @property
    def declarations(self) -> tuple[WebhookDeclaration, ...]:
        """The declarations, in the order they were made."""
        return tuple(d.declaration for d in self._declared.values())

    def _default_name(self, path: str) -> str:
        # Paths that differ only in punctuation get the same slug: number the later ones.
        taken = {d.declaration.name for d in self._declared.values()}
        slug = _slug(path)
        name, count = f"{slug}.{self.name}.{self.domain}", 1
        while name in taken:
            count += 1
            name = f"{slug[:58]}-{count}.{self.name}.{self.domain}"
        return name

    def declare(self, declaration: WebhookDeclaration, handler: Any) -> None:
        """Add a declaration with its handler (an admission handler or a Converter)."""
        if declaration.path in self._declared:
            raise LocalProtocolError(f"a webhook is already declared at {declaration.path!r}")
        if any(d.declaration.name == declaration.name for d in self._declared.values()):
            raise LocalProtocolError(f"a webhook is already named {declaration.name!r}")
        self._declared[declaration.path] = _Declared(declaration, handler)

    def _admission(
        self,
        kind: WebhookKind,
        path: str,
        resources: Sequence[GroupVersionResource | type[DeclaredKind]],
        opts: Any,
    ) -> Callable[[H], H]:
        name = opts.pop("name", None) or self._default_name(path)
        classes = [r for r in resources if isinstance(r, type)]
        if classes and len(resources) > 1:
            raise LocalProtocolError(
                f"webhook {path!r}: a kind ({classes[0].__name__}) is declared alone, so its "
                "handler's objects are of one class; declare resources to get mappings"
            )
        named = tuple(resource_info(r).gvr if isinstance(r, type) else r for r in resources)
        declaration = WebhookDeclaration(name, path, kind, named, **opts)

        def register(handler: H) -> H:
            self.declare(declaration, typed_handler(classes[0], handler) if classes else handler)
            return handler

        return register

    def validating(
        self,
        path: str,
        *resources: GroupVersionResource | type[DeclaredKind],
        name: str | None = None,
        operations: Sequence[str] = ("CREATE", "UPDATE"),
        failure_policy: str = "Fail",
        side_effects: str = "None",
        timeout_seconds: int = 10,
        namespace_selector: Mapping[str, Any] | None = None,
        object_selector: Mapping[str, Any] | None = None,
        match_policy: str = "Equivalent",
        scope: str = "*",
        max_body_size: int | None = None,
    ) -> Callable[[H], H]:
        """Decorate an admission handler (sync or async) as a validating webhook.

        Given a kind (``validating("/validate", Widget)``, alone) the handler is handed an
        :class:`~kubemoon_core.webhooks.AdmissionRequest` of that class (an object that does
        not decode is denied with 400 naming its path); given resources, one of mappings.
        """
        return self._admission(
            WebhookKind.VALIDATING,
            path,
            resources,
            {
                "name": name,
                "operations": tuple(operations),
                "failure_policy": failure_policy,
                "side_effects": side_effects,
                "timeout_seconds": timeout_seconds,
                "namespace_selector": namespace_selector,
                "object_selector": object_selector,
                "match_policy": match_policy,
                "scope": scope,
                "max_body_size": max_body_size,
            },
        )

    def mutating(
        self,
        path: str,
        *resources: GroupVersionResource | type[DeclaredKind],
        name: str | None = None,
        operations: Sequence[str] = ("CREATE", "UPDATE"),
        failure_policy: str = "Fail",
        side_effects: str = "None",
        timeout_seconds: int = 10,
        namespace_selector: Mapping[str, Any] | None = None,
        object_selector: Mapping[str, Any] | None = None,
        match_policy: str = "Equivalent",
        reinvocation_policy: str = "Never",
        scope: str = "*",
        max_body_size: int | None = None,
    ) -> Callable[[H], H]:
        """Decorate an admission handler (sync or async) as a mutating webhook; a kind is
        handled as by :meth:`validating`."""
        return self._admission(
            WebhookKind.MUTATING,
            path,
            resources,
            {
                "name": name,
                "operations": tuple(operations),
                "failure_policy": failure_policy,
                "side_effects": side_effects,
                "timeout_seconds": timeout_seconds,
                "namespace_selector": namespace_selector,
                "object_selector": object_selector,
                "match_policy": match_policy,
                "reinvocation_policy": reinvocation_policy,
                "scope": scope,
                "max_body_size": max_body_size,
            },
        )

    def conversion(
        self,
        path: str,
        crd: str,
        converter: Converter,
        *,
        name: str | None = None,
        max_body_size: int | None = None,
    ) -> None:
        """Declare the conversion webhook of the CRD named ``crd`` (``<plural>.<group>``)."""
        declaration = WebhookDeclaration(
            name or self._default_name(path),
            path,
            WebhookKind.CONVERSION,
            crd=crd,
            max_body_size=max_body_size,
        )
        self.declare(declaration, converter)

    # -- derived -------------------------------------------------------------------------

    def app(self, app: WebhookApp | None = None) -> WebhookApp:
        """A :class:`WebhookApp` serving every declaration (added to ``app`` if given)."""
        app = app if app is not None else WebhookApp()
        for declared in self._declared.values():
            d, handler = declared.declaration, declared.handler
            if d.kind is WebhookKind.CONVERSION:
                limit = d.max_body_size or DEFAULT_MAX_CONVERSION_BODY_SIZE
                app.conversion(d.path, handler, name=d.name, max_body_size=limit)
            elif d.kind is WebhookKind.VALIDATING:
                app.validating(d.path, handler, name=d.name, max_body_size=d.max_body_size)
            else:
                app.mutating(d.path, handler, name=d.name, max_body_size=d.max_body_size)
        return app

    def configurations(
        self,
        endpoint: WebhookEndpoint,
        *,
        ca_bundle: bytes | None = None,
        inject_ca_from: str | None = None,
    ) -> WebhookConfigurations:
        """The configurations registering every declaration at ``endpoint``.

        ``ca_bundle`` (PEM) goes into every ``clientConfig``; ``inject_ca_from``
        (``namespace/certificate``) instead annotates each object for cert-manager's CA
        injector.
        """
        annotations = {"cert-manager.io/inject-ca-from": inject_ca_from} if inject_ca_from else {}
        metadata_extra: dict[str, Any] = {"annotations": annotations} if annotations else {}
        by_kind: dict[WebhookKind, list[dict[str, Any]]] = {
            WebhookKind.VALIDATING: [],
            WebhookKind.MUTATING: [],
        }
        conversions = []
        for d in self.declarations:
            client_config = endpoint.client_config(d.path, ca_bundle)
            if d.kind is WebhookKind.CONVERSION:
                conversions.append(
                    {
                        "apiVersion": "apiextensions.k8s.io/v1",
                        "kind": "CustomResourceDefinition",
                        "metadata": {"name": d.crd, **metadata_extra},
                        "spec": {
                            "conversion": {
                                "strategy": "Webhook",
                                "webhook": {
                                    "clientConfig": client_config,
                                    "conversionReviewVersions": ["v1"],
                                },
                            }
                        },
                    }
                )
                continue
            by_kind[d.kind].append(_admission_entry(d, client_config))
        configs: dict[WebhookKind, dict[str, Any] | None] = {}
        for kind, entries in by_kind.items():
            title = "Validating" if kind is WebhookKind.VALIDATING else "Mutating"
            configs[kind] = (
                {
                    "apiVersion": f"{ADMISSION_GROUP}/v1",
                    "kind": f"{title}WebhookConfiguration",
                    "metadata": {"name": f"{self.name}-{kind.value}", **metadata_extra},
                    "webhooks": entries,
                }
                if entries
                else None
            )
        return WebhookConfigurations(
            configs[WebhookKind.VALIDATING], configs[WebhookKind.MUTATING], tuple(conversions)
        )


def _admission_entry(d: WebhookDeclaration, client_config: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": d.name,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": [r.group],
                "apiVersions": [r.version],
                "operations": list(d.operations),
                "resources": [r.resource],
                "scope": d.scope,
            }
            for r in d.resources
        ],
        "failurePolicy": d.failure_policy,
        "sideEffects": d.side_effects,
        "matchPolicy": d.match_policy,
        "timeoutSeconds": d.timeout_seconds,
        "admissionReviewVersions": ["v1"],
    }
    if d.kind is WebhookKind.MUTATING:
        entry["reinvocationPolicy"] = d.reinvocation_policy
    if d.namespace_selector is not None:
        entry["namespaceSelector"] = dict(d.namespace_selector)
    if d.object_selector is not None:
        entry["objectSelector"] = dict(d.object_selector)
    return entry


# -- drift -------------------------------------------------------------------------------

# Every field of an admission webhook entry that decides which requests reach it or how
# they fail. Server-side apply owns only the fields a body sets, so a field added by hand
# (matchConditions, a selector) survives every apply: these are compared one by one.
_ENTRY_FIELDS = (
    "clientConfig",
    "rules",
    "matchConditions",
    "objectSelector",
    "namespaceSelector",
    "failurePolicy",
    "matchPolicy",
    "sideEffects",
    "timeoutSeconds",
    "admissionReviewVersions",
    "reinvocationPolicy",
)
# What the apiserver stores for a field a body leaves out (so "left out" never reads as drift).
_ENTRY_DEFAULTS: dict[str, Any] = {
    "matchConditions": [],
    "objectSelector": {},
    "namespaceSelector": {},
    "failurePolicy": "Fail",
    "matchPolicy": "Equivalent",
    "timeoutSeconds": 10,
}


def _normal_entry(entry: Mapping[str, Any], mutating: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in _ENTRY_FIELDS:
        if key == "reinvocationPolicy" and not mutating:
            continue
        value = entry.get(key)
        if value is None:
            value = "Never" if key == "reinvocationPolicy" else _ENTRY_DEFAULTS.get(key)
        if key == "clientConfig" and isinstance(value, Mapping):
            value = dict(value)
            service = value.get("service")
            if isinstance(service, Mapping):
                value["service"] = {"port": 443, **service}
        if key == "rules" and isinstance(value, list):
            value = [{"scope": "*", **r} if isinstance(r, Mapping) else r for r in value]
        out[key] = value
    return out


def webhook_drift(desired: Mapping[str, Any], observed: Mapping[str, Any]) -> list[str]:
    """The fields where a live webhook configuration differs from the declared one.

    ``desired`` is the body :meth:`WebhookDeclarations.configurations` derives, ``observed``
    the object as stored. Each entry is ``<webhook name>.<field>`` for a changed field,
    ``<name>`` for a declared webhook that is missing or an extra one added by hand, and
    ``webhooks`` when the order differs. Empty when the two agree field for field
    (apiserver defaults for fields the declaration leaves out count as agreeing).
    """
    mutating = str(desired.get("kind", "")).startswith("Mutating")
    wanted = [e for e in desired.get("webhooks") or () if isinstance(e, Mapping)]
    found_list = observed.get("webhooks") or ()
    found = {str(e.get("name")): e for e in found_list if isinstance(e, Mapping)}
    drift: list[str] = []
    names = [str(e.get("name")) for e in wanted]
    for entry in wanted:
        name = str(entry.get("name"))
        live = found.get(name)
        if live is None:
            drift.append(name)
            continue
        a = _normal_entry(entry, mutating)
        b = _normal_entry(live, mutating)
        drift.extend(f"{name}.{key}" for key in a if a[key] != b[key])
    drift.extend(n for n in found if n not in names)
    if not drift and [str(e.get("name")) for e in found_list if isinstance(e, Mapping)] != names:
        drift.append("webhooks")
    return drift
