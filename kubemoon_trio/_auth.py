"""Credentials for requests: static and file tokens, basic auth and exec plugins.

Rules: precedence as client-go: a token file (re-read when it changes), else a token, else
basic auth, else an exec plugin (skipped when a client certificate authenticates). Exec
credentials are cached until their ``expirationTimestamp``. After a 401 the credential that
was used is refreshed at most once (one plugin run, or one forced token-file read) and the
caller retries once. No credential ever reaches a ``repr``, an error or a log line.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import os
import re

from kubemoon_core._kubeconfig import (
    ClientConfig,
    ConfigError,
    ExecConfig,
    ExecCredential,
    exec_info,
    parse_exec_credential,
)
from kubemoon_sync._config import FileToken

from . import _backend

__all__ = ["Credentials"]

logger = logging.getLogger("kubemoon.auth")

# Printable ASCII only: checked in C, since it runs for every request.
_HEADER_SAFE = re.compile(r"[ -~]*")


class Credentials:
    """Produces the ``Authorization`` header of one :class:`ClientConfig`."""

    def __init__(self, config: ClientConfig) -> None:
        self._config = config
        self._file = FileToken(config.token_file) if config.token_file else None
        has_cert = bool(config.client_cert_file or config.client_cert_data)
        static = bool(self._file or config.token or config.username)
        self._exec: ExecConfig | None = None if static or has_cert else config.exec
        self._credential: ExecCredential | None = None
        self._token = ""
        self._generation = 0
        self._lock = _backend.Lock()
        self.exec_runs = 0

    def __repr__(self) -> str:
        kind = (
            "token-file"
            if self._file
            else "token"
            if self._config.token
            else "basic"
            if self._config.username
            else "exec"
            if self._exec
            else "none"
        )
        return f"<Credentials {kind} for {self._config.origin}>"

    async def authorization(self) -> tuple[str | None, int]:
        """The ``Authorization`` value to send (or None) and the generation it belongs to."""
        value, generation = await self._authorization()
        if value is not None and _HEADER_SAFE.fullmatch(value) is None:
            # Never echo it: h11 would quote the whole header in its error.
            raise ConfigError(
                "the credential contains characters not allowed in an HTTP header",
                file=self._config.source,
            )
        return value, generation

    async def _authorization(self) -> tuple[str | None, int]:
        config = self._config
        if self._file is not None:
            self._note(self._file.read())
            return f"Bearer {self._token}", self._generation
        if config.token:
            return f"Bearer {config.token}", 0
        if config.username is not None and config.password is not None:
            raw = f"{config.username}:{config.password}".encode()
            return f"Basic {base64.b64encode(raw).decode()}", 0
        if self._exec is not None:
            async with self._lock:
                credential = self._credential
                if credential is None or credential.expired(_backend.wall_time()):
                    await self._run_exec(self._exec)
                return f"Bearer {self._token}", self._generation
        return None, 0

    async def refresh(self, generation: int) -> bool:
        """React to a 401 answered to credentials of ``generation``; True if a retry may help."""
        if self._file is not None:
            before = self._generation
            self._note(self._file.read(force=True))
            return self._generation != before or generation != self._generation
        if self._exec is not None:
            async with self._lock:
                if generation == self._generation:
                    await self._run_exec(self._exec)
            return True
        return False

    def _cluster_info(self, exec_config: ExecConfig) -> ClientConfig:
        """The cluster as the plugin may see it: a CA file is sent as data, as kubectl does."""
        config = self._config
        if exec_config.provide_cluster_info and config.ca_file and not config.ca_data:
            try:
                with open(config.ca_file, "rb") as handle:
                    return dataclasses.replace(config, ca_data=handle.read())
            except OSError:
                return config
        return config

    def _note(self, token: str) -> None:
        if token != self._token:
            self._token = token
            self._generation += 1

    async def _run_exec(self, exec_config: ExecConfig) -> None:
        where = {"file": exec_config.source, "key": f"exec {exec_config.command}"}
        if exec_config.interactive_mode == "Always":
            raise ConfigError("the exec plugin requires an interactive terminal", **where)
        env = dict(os.environ)
        env.update(exec_config.env)
        env["KUBERNETES_EXEC_INFO"] = exec_info(exec_config, self._cluster_info(exec_config))
        argv = [exec_config.command, *exec_config.args]
        self.exec_runs += 1
        logger.debug("running exec credential plugin %s", exec_config.command)
        try:
            code, output = await _backend.run_process(argv, env)
        except OSError as exc:
            hint = f" ({exec_config.install_hint.strip()})" if exec_config.install_hint else ""
            raise ConfigError(
                f"cannot run the exec plugin: {exc.strerror or type(exc).__name__}{hint}", **where
            ) from None
        if code != 0:
            raise ConfigError(f"the exec plugin exited with code {code}", **where)
        credential = parse_exec_credential(output, exec_config)
        if credential.token is None:
            raise ConfigError(
                "the exec plugin returned a client certificate; only tokens are supported",
                **where,
            )
        self._credential = credential
        self._token = credential.token
        self._generation += 1
