"""A user's controller: every ConfigMap labelled ``example.com/backup=true`` gets a backup.

The backup ``<name>-backup`` holds the same data and names the original as its owner, so
the controller never deletes anything itself: Kubernetes' garbage collector removes a
backup when its original goes.
"""

from __future__ import annotations

from typing import Any

from kubemoon_core import GroupVersionResource, ListOptions
from kubemoon_trio import Client

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
LABEL = "example.com/backup"


def backup_of(original: dict[str, Any]) -> dict[str, Any]:
    """The backup ConfigMap that ``original`` should have."""
    meta = original["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{meta['name']}-backup",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": original.get("data") or {},
    }


async def run(client: Client, namespace: str) -> None:
    """Keep the backups of ``namespace`` up to date until cancelled."""
    options = ListOptions(label_selector=f"{LABEL}=true")
    while True:  # a watch ends when the server closes it: start a new one
        async with client.watch(CONFIGMAPS, namespace=namespace, options=options) as events:
            async for event in events:
                if event.type in ("ADDED", "MODIFIED"):
                    await client.apply(
                        CONFIGMAPS,
                        backup_of(event.object),
                        field_manager="backup-controller",
                        namespace=namespace,
                        force=True,
                    )
