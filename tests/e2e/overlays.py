"""The deploy/ overlays as ``kubectl kustomize`` renders them: what the e2e tier installs.

The tests take the manifests from this rendered output rather than from hand-picked files
under deploy/, so an overlay that leaves a file out, or patches it wrongly, fails here.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import yaml

from kubemoon_testing import MissingBinariesError, default_binary_dir

DEPLOY = Path(__file__).parents[2] / "deploy"
OVERLAYS = ("cert-manager", "self-managed", "sharded")
RBAC_KINDS = frozenset(
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)


@functools.cache
def rendered_text(overlay: str) -> str:
    """The YAML ``kubectl kustomize deploy/overlays/<overlay>`` prints."""
    kubectl = default_binary_dir() / "kubectl"
    if not kubectl.exists():
        raise MissingBinariesError(f"{kubectl} is missing: run kubemoon-testenv build")
    done = subprocess.run(
        [str(kubectl), "kustomize", str(DEPLOY / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize {overlay} failed: {done.stderr.strip()}")
    return done.stdout


def rendered(overlay: str, kinds: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """The rendered overlay's objects (fresh copies), only of ``kinds`` when given."""
    documents = [d for d in yaml.safe_load_all(rendered_text(overlay)) if d]
    return [d for d in documents if kinds is None or d["kind"] in kinds]


def rendered_one(overlay: str, kind: str) -> dict[str, Any]:
    """The one object of ``kind`` in the rendered overlay."""
    (found,) = rendered(overlay, frozenset({kind}))
    return found
