"""The command lines of the test control plane: what etcd, kube-apiserver and
kube-controller-manager are started with, and why each flag is there.

Pure: paths and settings in, argument lists out (``kubemoon_testing._apiserver`` starts the
processes; ``kubemoon_testing._config_files`` writes the files the flags name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ._pki import _Pki

__all__: list[str] = []

#: The controllers the test kube-controller-manager runs: cascading deletion and namespace
#: deletion. Everything else (service-account tokens, pods, nodes, ...) stays off.
_CONTROLLERS = ("garbage-collector-controller", "namespace-controller")


def etcd_command(etcd_bin: Path, work_dir: Path, etcd_url: str) -> list[str]:
    """A single-member etcd serving ``etcd_url``, its data in ``work_dir``."""
    return [
        str(etcd_bin),
        "--name=kubemoon",
        f"--data-dir={work_dir / 'etcd-data'}",
        f"--listen-client-urls={etcd_url}",
        f"--advertise-client-urls={etcd_url}",
        # Port 0: a single member never talks to peers, but etcd needs a URL.
        "--listen-peer-urls=http://127.0.0.1:0",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_command(
    apiserver_bin: Path,
    *,
    etcd_url: str,
    port: int,
    work_dir: Path,
    pki: _Pki,
    admission_config: Path | None,
    watch_cache: bool,
    min_request_timeout: int | None,
    tracing_config: Path | None,
    feature_gates: Mapping[str, bool],
    extra_args: Sequence[str],
) -> list[str]:
    """kube-apiserver on 127.0.0.1:``port``; ``extra_args`` come last, so they win."""
    args = [
        str(apiserver_bin),
        f"--etcd-servers={etcd_url}",
        # Both addresses: without them the server fails where there is no default route.
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={work_dir / 'apiserver-certs'}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_file}",
        f"--token-auth-file={work_dir / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer=https://127.0.0.1:{port}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-account-key-file={pki.sa_key}",
        "--service-cluster-ip-range=10.0.0.0/24",
        # No controller would create the ServiceAccount that admission insists on.
        "--disable-admission-plugins=ServiceAccount",
        # A single apiserver without the endpoints controller.
        "--endpoint-reconciler-type=none",
        # Only tests compact etcd (ApiServer.compact), so 410s happen on purpose.
        "--etcd-compaction-interval=0",
    ]
    if admission_config is not None:
        args.append(f"--admission-control-config-file={admission_config}")
    if not watch_cache:
        args.append("--watch-cache=false")
    if min_request_timeout is not None:
        args.append(f"--min-request-timeout={min_request_timeout}")
    if tracing_config is not None:
        args.append(f"--tracing-config-file={tracing_config}")
    if feature_gates:
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(feature_gates.items()))
        args.append(f"--feature-gates={gates}")
    args.extend(extra_args)
    return args


def controller_manager_command(
    binary: Path, kubeconfig: Path, extra_args: Sequence[str]
) -> list[str]:
    """kube-controller-manager running :data:`_CONTROLLERS` only, serving nothing."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--controllers={','.join(_CONTROLLERS)}",
        # One instance per apiserver: no Lease to wait for or to write.
        "--leader-elect=false",
        # No HTTPS endpoint at all (nothing listens; ApiServer probes the garbage collector).
        "--secure-port=0",
        # Deleting a namespace lists and empties every resource type: the default
        # client rate limit (20 qps) would make each deletion take seconds.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        *extra_args,
    ]
