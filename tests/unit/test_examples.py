"""The examples run and print what their docstrings promise."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _run(script: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        check=False,
    )


def _load(script: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), EXAMPLES / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_watch_once_prints_the_bookmark_then_the_added_event() -> None:
    result = _run("watch_once.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "BOOKMARK 12\nADDED 13\n"


def test_embed_any_loop_runs_as_a_script() -> None:
    result = _run("embed_any_loop.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ADDED a 9\nADDED b 11\nMODIFIED a 12\n"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_embedded_reflector_resumes_after_a_cut_mid_chunk(backend: str) -> None:
    import anyio

    from kubemoon_testing import Reply, ScriptedServer

    example = _load("embed_any_loop.py")

    def cm(name: str, rv: str) -> dict[str, object]:
        return {"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}}

    events = [("ADDED", cm("b", "11")), ("MODIFIED", cm("a", "12")), ("DELETED", cm("b", "13"))]
    server = ScriptedServer()
    server.add(
        Reply.json({"metadata": {"resourceVersion": "10"}, "items": [cm("a", "9")]}),
        Reply.watch(events, chunk_size=9, drop_after=150),  # cut inside the second event
        Reply.watch(events[1:], chunk_size=4, stall=True),
    )
    with server:
        config = server.client_config(token="tok")
        lines = anyio.run(lambda: example.run_reflector(config, changes=4), backend=backend)
    assert lines == ["ADDED a 9", "ADDED b 11", "MODIFIED a 12", "DELETED b 13"]
    first_watch, second_watch = server.requests[1:3]
    assert first_watch.query["resourceVersion"] == "10"
    assert second_watch.query["resourceVersion"] == "11"
    assert second_watch.header("authorization") == "Bearer tok"


def test_the_demo_reads_a_ready_condition_only_once_written_for_the_generation() -> None:
    demo = _load("demo.py")
    meta = {"name": "m", "namespace": "n", "generation": 2}
    ready = {"type": "Ready", "status": "True", "reason": "Synced", "observedGeneration": 2}
    assert demo.ready_condition({"metadata": meta}) is None  # no status yet
    assert demo.ready_condition({"metadata": meta, "status": {}}) is None
    stale = {**ready, "observedGeneration": 1}
    assert demo.ready_condition({"metadata": meta, "status": {"conditions": [stale]}}) is None
    other = {"type": "Other", "status": "True", "observedGeneration": 2}
    written = {"metadata": meta, "status": {"conditions": [other, ready]}}
    assert demo.ready_condition(written) == ready
