"""Reaction latency of a converged, idle operator: how long after a source ConfigMap is
updated every copy carries the new data.

One mirror's source (``settings-000``) is patched ``UPDATES`` times, one merge patch of one
key every ``INTERVAL`` seconds (started on a fixed schedule, so a slow answer does not
stretch the gaps). A cluster-wide watch of ConfigMaps named ``settings-000``, opened before
the first patch on a connection of its own and read by a thread, timestamps the first
event in which each target's copy (and the source itself: the floor) carries each new
value. An update's latency is the
time from just before its patch is sent until every copy is seen carrying it or a later
update (an operator may coalesce updates that come close together): what a user waits
for. The watch adds its own delivery delay to every figure, the same for
every operator.
"""

from __future__ import annotations

import http.client
import json
import ssl
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

UPDATES = 200
INTERVAL = 0.1
SETTLE_TIMEOUT = 10.0  # after the last patch, for the last copies to arrive
SOURCE = "settings-000"
KEY = "key-0"
PREFIX = "reaction "
MERGE_PATCH = "application/merge-patch+json"


@dataclass
class Reaction:
    """The latencies of one run, in seconds; updates whose copies never all arrived."""

    latencies: list[float] = field(default_factory=list)
    # The floor: from the same instant until the source's own event arrives on the watch
    # (one write and one watch delivery; an operator needs that, then writes and a delivery).
    floor: list[float] = field(default_factory=list)
    missing: int = 0
    error: str | None = None

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def p99(self) -> float:
        return self.quantile(0.99)

    def floor_text(self) -> str:
        if not self.floor:
            return "floor not seen"
        ordered = sorted(self.floor)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return (
            f"floor (the source's own event on the same watch) p50 "
            f"{statistics.median(ordered) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms"
        )


class _CopyWatch(threading.Thread):
    """Reads the watch and records when each (namespace, value) was first seen."""

    def __init__(self, conn: http.client.HTTPSConnection, targets: set[str]) -> None:
        super().__init__(daemon=True)
        self.conn = conn
        self.targets = targets
        self.seen: dict[tuple[str, int], float] = {}  # (namespace, update number) -> time
        self.lock = threading.Lock()
        self.error: str | None = None
        self.stopping = False  # the connection is closed under the reader on purpose

    def run(self) -> None:
        try:
            resp = self.conn.getresponse()
            if resp.status != 200:
                self.error = f"watch answered {resp.status}: {resp.read(300)!r}"
                return
            while True:
                line = resp.readline()
                if not line:
                    return
                now = time.monotonic()
                event = json.loads(line)
                obj = event.get("object") or {}
                namespace = (obj.get("metadata") or {}).get("namespace")
                value = (obj.get("data") or {}).get(KEY)
                if namespace in self.targets and isinstance(value, str):
                    number = value.removeprefix(PREFIX)
                    if number.isdigit():
                        with self.lock:
                            self.seen.setdefault((namespace, int(number)), now)
        except (OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
            # http.client raises AttributeError when the connection is closed mid-read.
            if not self.stopping:
                self.error = f"watch failed: {type(exc).__name__}: {exc}"


def measure_reaction(
    admin: Any, source_namespace: str, targets: list[str], updates: int = UPDATES
) -> Reaction:
    """Patch the source ``updates`` times and time each until every copy has it."""
    result = Reaction()
    context = ssl.create_default_context(cafile=admin.context_cafile)
    headers = {"Authorization": f"Bearer {admin.token}", "Accept": "application/json"}
    selector = f"metadata.name%3D{SOURCE}"
    listed = admin.request("GET", f"/api/v1/configmaps?fieldSelector={selector}")
    conn = http.client.HTTPSConnection("127.0.0.1", admin.port, context=context, timeout=60)
    conn.request(
        "GET",
        f"/api/v1/configmaps?watch=1&fieldSelector={selector}"
        f"&resourceVersion={listed['metadata']['resourceVersion']}&timeoutSeconds=600",
        headers=headers,
    )
    watch = _CopyWatch(conn, {*targets, source_namespace})
    watch.start()
    sent: list[float] = []
    path = f"/api/v1/namespaces/{source_namespace}/configmaps/{SOURCE}"
    try:
        start = time.monotonic()
        for n in range(updates):
            due = start + n * INTERVAL
            time.sleep(max(0.0, due - time.monotonic()))
            sent.append(time.monotonic())
            admin.request("PATCH", path, {"data": {KEY: f"{PREFIX}{n}"}}, content_type=MERGE_PATCH)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline and watch.error is None:
            with watch.lock:
                if all((t, len(sent) - 1) in watch.seen for t in targets):
                    break
            time.sleep(0.05)
    finally:
        watch.stopping = True
        conn.close()  # ends the watch thread's read
        watch.join(5)
    with watch.lock:
        seen = dict(watch.seen)
    for n, at in enumerate(sent):
        # A copy carries update n once it shows n or a later one (updates may coalesce).
        arrivals = [
            min((when for (ns, m), when in seen.items() if ns == t and m >= n), default=None)
            for t in targets
        ]
        source_seen = seen.get((source_namespace, n))
        if source_seen is not None:
            result.floor.append(source_seen - at)
        if any(a is None for a in arrivals):
            result.missing += 1
        else:
            result.latencies.append(max(a for a in arrivals if a is not None) - at)
    if watch.error is not None and result.missing:
        result.error = watch.error
    if not result.latencies:
        result.error = result.error or "no update reached every copy"
    return result
