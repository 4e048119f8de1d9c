"""Fault-tier fixtures: every scenario runs against every adapter."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fault_support import PLUGIN, Adapter

from kubemoon_core._client_config import ExecConfig


@pytest.fixture(params=["trio", "asyncio", "sync"])
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    """Each fault scenario runs once per adapter."""
    driver = Adapter(request.param)
    yield driver
    driver.shutdown()


@pytest.fixture
def exec_plugin(tmp_path: Path) -> Callable[..., ExecConfig]:
    """Make an ExecConfig running a small Python plugin that counts its runs.

    Each run prints token ``exec-secret-N``; ``runs()`` is read from the counter file.
    """
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    counter = tmp_path / "runs"

    def make(
        expiration: str | None = None,
        api_version: str = "client.authentication.k8s.io/v1",
        *,
        provide_cluster_info: bool = False,
    ) -> ExecConfig:
        args = [str(script), str(counter)] + ([expiration] if expiration else [])
        return ExecConfig(
            api_version=api_version,
            command=sys.executable,
            args=tuple(args),
            interactive_mode="Never",
            provide_cluster_info=provide_cluster_info,
            source=str(tmp_path / "kubeconfig"),
        )

    return make
