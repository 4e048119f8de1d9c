"""Whatever is declared, what is served and what is registered agree: every declaration
is one route of the app and one entry (or CRD conversion) of the configurations, at the
same path, and nothing else is there."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from kubemoon_core import GroupVersionResource
from kubemoon_core.webhooks import (
    AdmissionResponse,
    Converter,
    WebhookDeclarations,
    WebhookEndpoint,
    WebhookKind,
)

SEGMENT = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.~", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)
PATH = st.lists(SEGMENT, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
RESOURCE = st.builds(
    GroupVersionResource,
    st.sampled_from(["", "apps", "kubemoon.dev"]),
    st.sampled_from(["v1", "v1beta1"]),
    st.sampled_from(["configmaps", "widgets", "deployments"]),
)
DECLARATION = st.tuples(
    PATH,
    st.sampled_from(list(WebhookKind)),
    st.lists(RESOURCE, min_size=1, max_size=3),
)
ENDPOINT = st.one_of(
    st.builds(WebhookEndpoint, service=st.just(("ops", "hooks")), port=st.integers(1, 65535)),
    st.builds(WebhookEndpoint, url=st.sampled_from(["https://127.0.0.1:9443", "https://[::1]:1"])),
)


def allow(request: object) -> AdmissionResponse:
    return AdmissionResponse.allow()


@given(st.lists(DECLARATION, max_size=8, unique_by=lambda d: d[0]), ENDPOINT)
@example(
    [
        ("/a.", WebhookKind.VALIDATING, [GroupVersionResource("", "v1", "configmaps")]),
        ("/a", WebhookKind.MUTATING, [GroupVersionResource("", "v1", "configmaps")]),
    ],
    WebhookEndpoint(url="https://127.0.0.1:9443"),
)
def test_served_and_registered_agree(
    declared: list[tuple[str, WebhookKind, list[GroupVersionResource]]],
    endpoint: WebhookEndpoint,
) -> None:
    hooks = WebhookDeclarations("props")
    for index, (path, kind, resources) in enumerate(declared):
        if kind is WebhookKind.CONVERSION:
            hooks.conversion(path, f"crd{index}.kubemoon.dev", Converter())
        elif kind is WebhookKind.VALIDATING:
            hooks.validating(path, *resources)(allow)
        else:
            hooks.mutating(path, *resources)(allow)
    routes = hooks.app().routes
    configs = hooks.configurations(endpoint, ca_bundle=b"PEM")
    registered: dict[str, tuple[str, WebhookKind]] = {}
    for config, kind in (
        (configs.validating, WebhookKind.VALIDATING),
        (configs.mutating, WebhookKind.MUTATING),
    ):
        for entry in (config or {}).get("webhooks", []):
            registered[_path(entry["clientConfig"], endpoint)] = (entry["name"], kind)
    for crd in configs.conversions:
        client_config = crd["spec"]["conversion"]["webhook"]["clientConfig"]
        registered[_path(client_config, endpoint)] = ("", WebhookKind.CONVERSION)
    assert registered.keys() == routes.keys()
    for path, (name, kind) in registered.items():
        assert routes[path][1] is kind
        if name:
            assert routes[path][0] == name
    names = [name for name, _ in routes.values()]
    assert len(set(names)) == len(names)


def _path(client_config: dict[str, object], endpoint: WebhookEndpoint) -> str:
    if endpoint.service is not None:
        service = client_config["service"]
        assert isinstance(service, dict)
        return str(service["path"])
    url = str(client_config["url"])
    assert endpoint.url is not None and url.startswith(endpoint.url)
    return url.removeprefix(endpoint.url)
