"""Shared pieces of the fault tier: an adapter driver and an exec credential plugin.

The scripted server runs in the test's trio loop. The trio adapter is awaited directly;
the blocking adapter runs in a worker thread (``trio.to_thread``), and the asyncio adapter
in an asyncio loop that runs on a thread of its own for the whole test: those threads
belong to the test harness, never to the adapter.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapter_driver import PODS, Adapter

from kubemoon_testing._scripted import RecordedRequest, Reply

__all__ = ["PODS", "Adapter"]


PLUGIN = textwrap.dedent(
    """
    import json, os, pathlib, sys
    counter = pathlib.Path(sys.argv[1])
    runs = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(runs))
    info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
    pathlib.Path(sys.argv[1] + ".info").write_text(json.dumps(info))
    status = {"token": "exec-secret-%d" % runs}
    if len(sys.argv) > 2:
        status["expirationTimestamp"] = sys.argv[2]
    print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                      "status": status}))
    """
)


def plugin_runs(tmp_path: Path) -> int:
    """How many times the exec plugin ran."""
    counter = tmp_path / "runs"
    return int(counter.read_text()) if counter.exists() else 0


def pod(name: str, rv: str) -> dict[str, Any]:
    """A minimal Pod."""
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class Collection:
    """A pod collection as a scripted API server would serve it to an informer.

    LIST answers ``initial`` at ``list_rv``; a WATCH answers every event after the
    requested resourceVersion, shaped by the next entry of ``plan`` (keyword arguments for
    :meth:`Reply.watch`, or a whole :class:`Reply`); once the plan is used up, watches
    deliver their events and then stay open, silent.
    """

    def __init__(
        self,
        initial: list[dict[str, Any]],
        events: list[tuple[str, dict[str, Any]]],
        *,
        list_rv: str = "10",
        plan: list[Any] | None = None,
        list_plan: list[Any] | None = None,
    ) -> None:
        self.initial = initial
        self.events = events
        self.list_rv = list_rv
        self.plan = list(plan or [])
        self.list_plan = list(list_plan or [])
        self.watches: list[RecordedRequest] = []
        self.lists: list[RecordedRequest] = []

    def handler(self, request: RecordedRequest) -> Reply:
        if request.query.get("watch") == "1":
            self.watches.append(request)
            since = int(request.query.get("resourceVersion") or 0)
            pending = [
                (t, o) for t, o in self.events if int(o["metadata"]["resourceVersion"]) > since
            ]
            step = self.plan.pop(0) if self.plan else {"stall": True}
            if isinstance(step, Reply):
                return step
            step = dict(step)
            step.setdefault("chunk_size", 7)
            return Reply.watch(pending, **step)
        self.lists.append(request)
        if self.list_plan:
            return self.list_plan.pop(0)  # type: ignore[no-any-return]
        document = {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": self.list_rv},
            "items": self.initial,
        }
        return Reply.json(document)


def summary(changes: list[Any]) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of each change."""
    return [(c.type.value, c.key.name, c.object["metadata"]["resourceVersion"]) for c in changes]


async def run_informer(
    adapter: Adapter, informer: Any, done: Callable[[], bool], limit: float = 10
) -> None:
    """Run an informer until ``done()`` holds (or ``limit`` seconds pass, then fail)."""
    give_up = time.monotonic() + limit

    def until() -> bool:
        return done() or time.monotonic() > give_up

    await adapter.call(informer.run, until=until)
    assert done(), "the informer did not reach the expected state in time"
