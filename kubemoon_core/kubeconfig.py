"""Client configuration: kubeconfig files, in-cluster configuration and exec credentials."""

from ._client_config import SERVICE_ACCOUNT_DIR, ClientConfig, ExecConfig, in_cluster_config
from ._exec_credentials import ExecCredential, exec_info, parse_exec_credential
from ._kubeconfig import Kubeconfig, merge_kubeconfigs
from ._kubeconfig_yaml import MAX_KUBECONFIG_BYTES
from ._public import publish

__all__ = [
    "ClientConfig",
    "exec_info",
    "ExecConfig",
    "ExecCredential",
    "in_cluster_config",
    "Kubeconfig",
    "MAX_KUBECONFIG_BYTES",
    "merge_kubeconfigs",
    "parse_exec_credential",
    "SERVICE_ACCOUNT_DIR",
]

publish(__name__, globals(), __all__)
