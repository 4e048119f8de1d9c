"""Loading configuration from disk and the environment, shared by both adapters.

Rules: the file reading lives here and the merging rules in ``kubemoon_core._kubeconfig``.
Order of ``load_config``: an explicit path, then ``KUBECONFIG`` (several files, merged as
kubectl merges them; missing files are skipped), then the in-cluster ServiceAccount, then
``~/.kube/config``. Token files are re-read when they change on disk (rotation).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kubemoon_core._client_config import (
    SERVICE_ACCOUNT_DIR,
    ClientConfig,
    ConfigError,
    in_cluster_config,
)
from kubemoon_core._kubeconfig import merge_kubeconfigs
from kubemoon_core._kubeconfig_yaml import MAX_KUBECONFIG_BYTES

__all__ = [
    "TOKEN_FILE_LIMIT",
    "FileToken",
    "kubeconfig_paths",
    "load_config",
    "load_in_cluster_config",
    "load_kubeconfig",
]


def kubeconfig_paths(env: Mapping[str, str] | None = None) -> list[str]:
    """The kubeconfig files kubectl would consider, in priority order (may not exist)."""
    env = os.environ if env is None else env
    listed = env.get("KUBECONFIG", "")
    if listed:
        seen: list[str] = []
        for item in listed.split(os.pathsep):
            if item and item not in seen:
                seen.append(item)
        return seen
    home = env.get("HOME") or os.path.expanduser("~")
    return [os.path.join(home, ".kube", "config")]


def _read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            # One byte more than the limit, so that a huge file is refused unread.
            data = handle.read(MAX_KUBECONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        reason = getattr(exc, "strerror", None) or str(exc)
        shown = path.replace("\x00", "\\x00")
        raise ConfigError(f"cannot read the kubeconfig: {reason}", file=shown) from None
    if len(data) > MAX_KUBECONFIG_BYTES:
        raise ConfigError(f"the kubeconfig is larger than {MAX_KUBECONFIG_BYTES} bytes", file=path)
    # UTF-8, or UTF-16 with a byte order mark, as kubectl's YAML reader accepts.
    encoding = "utf-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"the kubeconfig is not {encoding.upper()} (byte {exc.start})", file=path
        ) from None


def _check_files(config: ClientConfig) -> None:
    """Open the files the selected entries name, as kubectl does before using them."""
    named = [("certificate-authority", config.ca_file)]
    if config.client_cert_file or config.client_cert_data:
        named += [("client-certificate", config.client_cert_file)]
        named += [("client-key", config.client_key_file)]
    if config.scheme == "https" and not config.token:
        named.append(("tokenFile", config.token_file))
    for key, path in named:
        if path is None:
            continue
        try:
            # Non-blocking: opening a FIFO must not hang the check.
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        except OSError as exc:
            raise ConfigError(
                f"cannot read {path}: {exc.strerror}", file=config.source, key=key
            ) from None


def load_kubeconfig(
    path: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ClientConfig:
    """Load a kubeconfig and return the configuration of ``context`` (or current-context).

    With ``path``, only that file is read and it must exist; otherwise the files of
    ``KUBECONFIG`` are merged (missing ones skipped), or ``~/.kube/config`` is read. As
    kubectl, every file must decode (an entry that is never used included), and the files
    the selected entries name (CA, client certificate and key, a token file) must open.
    A file larger than :data:`~kubemoon_core.kubeconfig.MAX_KUBECONFIG_BYTES` is refused unread.
    """
    paths = [os.fspath(path)] if path is not None else kubeconfig_paths(env)
    sources: list[tuple[str, str | None]] = []
    for item in paths:
        absolute = os.path.abspath(item)
        text = _read_text(absolute)
        if text is None:
            if path is not None:
                raise ConfigError("the kubeconfig file does not exist", file=absolute)
            continue
        sources.append((absolute, text))
    if not sources:
        raise ConfigError("no kubeconfig file found", file=os.pathsep.join(paths))
    config = merge_kubeconfigs(sources).select(context)
    _check_files(config)
    return config


def load_in_cluster_config(
    *, base_dir: str = SERVICE_ACCOUNT_DIR, env: Mapping[str, str] | None = None
) -> ClientConfig:
    """The configuration of a pod, from its environment and its ServiceAccount directory.

    ``base_dir`` holds ``token``, ``ca.crt`` and ``namespace`` (overridable for tests).
    """
    env = os.environ if env is None else env
    namespace: str | None = None
    try:
        with open(os.path.join(base_dir, "namespace"), encoding="utf-8") as handle:
            namespace = handle.read()
    except OSError:
        namespace = None
    config = in_cluster_config(env, base_dir=base_dir, namespace=namespace)
    assert config.token_file is not None
    FileToken(config.token_file).read()  # fail now, and clearly, when there is no token
    return config


def load_config(
    *,
    context: str | None = None,
    env: Mapping[str, str] | None = None,
    base_dir: str = SERVICE_ACCOUNT_DIR,
) -> ClientConfig:
    """The configuration a program should use, found the way controllers usually find it.

    ``KUBECONFIG`` if set; else the in-cluster ServiceAccount if
    ``KUBERNETES_SERVICE_HOST`` is set; else ``~/.kube/config``.
    """
    env = os.environ if env is None else env
    if not env.get("KUBECONFIG") and env.get("KUBERNETES_SERVICE_HOST") and context is None:
        return load_in_cluster_config(base_dir=base_dir, env=env)
    return load_kubeconfig(context=context, env=env)


#: The largest token file read (a ServiceAccount token is about a kilobyte).
TOKEN_FILE_LIMIT = 1 << 20


class FileToken:
    """A bearer token kept in a file, re-read whenever the file changes (rotation).

    The token never appears in ``repr`` or in an error.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._token = ""

    def __repr__(self) -> str:
        return f"FileToken({self.path!r})"

    def read(self, *, force: bool = False) -> str:
        """The current token; the file is read again only when it changed (or ``force``)."""
        try:
            info = os.stat(self.path)
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
            if force or stamp != self._stamp:
                with open(self.path, "rb") as handle:
                    raw = handle.read(TOKEN_FILE_LIMIT + 1)  # /dev/zero must not eat memory
                if len(raw) > TOKEN_FILE_LIMIT:
                    raise ConfigError(
                        f"the token file is larger than {TOKEN_FILE_LIMIT} bytes", file=self.path
                    )
                token = raw.decode("utf-8").strip()
                if not token:
                    raise ConfigError("the token file is empty", file=self.path, key="token")
                self._token, self._stamp = token, stamp
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the path
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise ConfigError(f"cannot read the token file: {reason}", file=self.path) from None
        return self._token
