"""An asyncio test next to the trio ones: anyio's pytest plugin (in kubemoon[testing])."""

from __future__ import annotations

import anyio
import pytest

from kubemoon_testing import ApiServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_asyncio_tests_run_too(kube_apiserver: ApiServer) -> None:
    import asyncio

    asyncio.get_running_loop()  # raises unless this runs on asyncio
    version = await anyio.to_thread.run_sync(lambda: kube_apiserver.request("GET", "/version"))
    assert version.json()["gitVersion"] == kube_apiserver.version
