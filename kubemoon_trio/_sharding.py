"""Sharded list and watch on the trio adapter: asking the server whether it shards.

Rules: the decisions are the core's (:func:`kubemoon_core.shard_probe_request`,
:func:`kubemoon_core.sharding_enabled`); this module only performs the request.
"""

from __future__ import annotations

from kubemoon_core import shard_probe_request, sharding_enabled

from ._client import Client

__all__ = ["detect_sharded_list_and_watch"]


async def detect_sharded_list_and_watch(client: Client) -> bool:
    """Whether the API server applies ``shardSelector`` (the ``ShardedListAndWatch`` gate).

    One LIST of namespaces with ``limit=1`` and a one-hash range: False means the server
    ignores selectors, so shards are only filtered client-side (each replica still
    receives the whole collection). With several apiservers behind a balancer the answer
    is one server's; clients filter client-side regardless.
    """
    return sharding_enabled(await client.request(shard_probe_request()))
