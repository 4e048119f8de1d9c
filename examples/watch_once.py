"""Watch a scripted API server once with the trio client.

Starts a :class:`kubemoon_testing.ScriptedServer` on 127.0.0.1 (HTTPS, throwaway CA) that
answers one WATCH with a bookmark and an added ConfigMap, split at awkward byte boundaries,
then watches it with :class:`kubemoon_trio.Client` and prints each event's type and
resourceVersion::

    $ python examples/watch_once.py
    BOOKMARK 12
    ADDED 13
"""

from __future__ import annotations

import trio

from kubemoon_core import GroupVersionResource, ListOptions
from kubemoon_testing import Reply, ScriptedServer
from kubemoon_trio import Client

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")

EVENTS = [
    ("BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": "12"}}),
    (
        "ADDED",
        {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": "demo", "namespace": "default", "resourceVersion": "13"},
            "data": {"greeting": "hello"},
        },
    ),
]


async def main() -> None:
    """Serve one watch, consume it, print one line per event."""
    async with ScriptedServer() as server:
        # 5-byte chunks: events arrive split across many chunks, as they may in real life.
        server.add(Reply.watch(EVENTS, chunk_size=5))
        async with Client(server.client_config(token="demo-token")) as client:
            options = ListOptions(resource_version="11", allow_watch_bookmarks=True)
            async with client.watch(CONFIGMAPS, namespace="default", options=options) as events:
                async for event in events:
                    print(event.type, event.resource_version)


if __name__ == "__main__":
    trio.run(main)
