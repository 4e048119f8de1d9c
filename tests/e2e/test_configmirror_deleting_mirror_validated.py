"""Regression (found by an attack): a mirror being deleted was admitted
unvalidated, so a tenant stored what the webhook refuses -- here the conversion
annotation -- and broke v1alpha1 for everyone.

``deletion_update`` admits every UPDATE of an object with a deletionTimestamp that keeps
``spec``, without validating it. A tenant holds its own mirror in deletion with a finalizer
of its own (it may update its mirrors, so it may add finalizers), then adds the annotation
``kubemoon.dev/v1beta1-namespace-selector`` through v1beta1: admitted, although the same
annotation is refused on any live mirror ("reserved for conversion"). A v1beta1 object
carrying it cannot be converted to v1alpha1 (``to_v1alpha1`` refuses it), so every
v1alpha1 request that includes it fails: the tenant's namespace list, and the cluster-wide
v1alpha1 LIST and WATCH of every other user (a GitOps or monitoring tool on the still
served version), for as long as the tenant keeps its finalizer.

Expected: what validation refuses is refused on a deleting object too (only the changes
that finishing a deletion needs -- finalizers -- are exempt); the cluster-wide v1alpha1
list keeps working. Observed: the annotation is stored and the list fails.
"""

from __future__ import annotations

import pytest
import trio
from test_configmirror_webhooks import (  # fixtures and helpers of the webhook tier
    Served,
    Tenant,
    grant,
    home,
    served,
    tenant,
)

from configmirror import CONFIGMIRRORS, CONFIGMIRRORS_V1BETA1
from configmirror._convert import SELECTOR_ANNOTATION
from kubemoon_core import ApiError
from kubemoon_testing import ApiServer
from kubemoon_trio import Client

pytestmark = pytest.mark.integration
__all__ = ["home", "served", "tenant"]  # fixtures, imported to be found

HOLD = "tenant.example/hold"


async def test_a_deleting_mirror_cannot_store_what_validation_refuses(
    configmirror_api: ApiServer, served: Served, tenant: Tenant, client: Client
) -> None:
    home = tenant.home
    # A tenant that may manage its mirrors may delete them too.
    rules = [{"apiGroups": ["kubemoon.dev"], "resources": ["configmirrors"], "verbs": ["delete"]}]
    await trio.to_thread.run_sync(lambda: grant(configmirror_api, home, "delete-mirrors", rules))
    held = {
        "apiVersion": "kubemoon.dev/v1beta1",
        "kind": "ConfigMirror",
        "metadata": {"name": "held", "finalizers": [HOLD]},
        "spec": {"source": "settings", "targets": {"namespaces": []}},
    }
    await tenant.user.create(CONFIGMIRRORS_V1BETA1, held, namespace=home)
    # A live mirror may not carry the annotation: the webhook refuses it.
    with pytest.raises(ApiError, match="reserved for conversion"):
        await tenant.user.patch(
            CONFIGMIRRORS_V1BETA1,
            "held",
            {"metadata": {"annotations": {SELECTOR_ANNOTATION: '{"matchLabels":{"a":"b"}}'}}},
            namespace=home,
        )
    try:
        await tenant.user.delete(CONFIGMIRRORS_V1BETA1, "held", namespace=home)
        stored = True
        try:
            await tenant.user.patch(
                CONFIGMIRRORS_V1BETA1,
                "held",
                {"metadata": {"annotations": {SELECTOR_ANNOTATION: '{"matchLabels":{"a":"b"}}'}}},
                namespace=home,
            )
        except ApiError:
            stored = False
        failure = None
        try:
            async for _ in client.list(CONFIGMIRRORS):  # another user, every namespace
                pass
        except ApiError as exc:
            failure = str(exc)
        assert not stored and failure is None, (
            f"a deleting mirror stored the reserved annotation unvalidated (stored={stored}); "
            f"the cluster-wide v1alpha1 list then fails: {(failure or '')[:300]}"
        )
    finally:
        await client.patch(
            CONFIGMIRRORS_V1BETA1,
            "held",
            {"metadata": {"finalizers": None, "annotations": {SELECTOR_ANNOTATION: None}}},
            namespace=home,
        )
