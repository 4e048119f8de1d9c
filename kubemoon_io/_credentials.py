"""The credentials of a :class:`~kubemoon_core.kubeconfig.ClientConfig`, for any event loop.

Rules: precedence as client-go: a token file (re-read when it changes), else a token, else
basic auth, else an exec plugin (skipped when a client certificate authenticates). Exec
credentials are kept until their ``expirationTimestamp``. After a 401 the credential that
was used is refreshed at most once (one plugin run, or one forced token-file read), and the
caller retries once. Running the plugin is the caller's only job: :meth:`plugin_run`
says what to run, :meth:`receive_plugin_output` takes the result. No credential ever reaches
a ``repr``, an error or a log line.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubemoon_core._client_config import ClientConfig, ConfigError, ExecConfig
from kubemoon_core._exec_credentials import ExecCredential, exec_info, parse_exec_credential

from ._config import FileToken

__all__ = ["PLUGIN_OUTPUT_LIMIT", "PLUGIN_TIMEOUT", "CredentialProvider", "PluginRun"]

# A plugin that prints more than this or runs longer is broken or hostile.
PLUGIN_OUTPUT_LIMIT = 1 << 20
PLUGIN_TIMEOUT = 60.0

# Printable ASCII only: checked in C, since it runs for every request.
_HEADER_SAFE = re.compile(r"[ -~]*")


@dataclass(frozen=True, slots=True)
class PluginRun:
    """An exec credential plugin to run: no stdin, stdout captured, stderr inherited.

    Kill it after ``timeout`` seconds; refuse more than ``output_limit`` bytes of stdout.
    """

    argv: tuple[str, ...] = field(repr=False)
    env: Mapping[str, str] = field(repr=False)
    command: str
    timeout: float = PLUGIN_TIMEOUT
    output_limit: int = PLUGIN_OUTPUT_LIMIT


class CredentialProvider:
    """Produces the ``Authorization`` header of one :class:`~kubemoon_core.kubeconfig.ClientConfig`.

    Use from any loop: before a request, if :meth:`plugin_run` returns a run, perform it and
    hand the result to :meth:`receive_plugin_output` (or :meth:`plugin_failed`); then send
    :meth:`header`. After a 401, call :meth:`refresh` with the generation that was sent and
    retry once if it returns True. Not thread-safe: serialise plugin runs (a lock).
    """

    def __init__(self, config: ClientConfig, *, plugin_timeout: float = PLUGIN_TIMEOUT) -> None:
        self._config = config
        self._file = FileToken(config.token_file) if config.token_file else None
        has_cert = bool(config.client_cert_file or config.client_cert_data)
        static = bool(self._file or config.token or config.username)
        self._exec: ExecConfig | None = None if static or has_cert else config.exec
        self._credential: ExecCredential | None = None
        self._stale = False
        self._token = ""
        self._generation = 0
        self._plugin_timeout = plugin_timeout
        self.plugin_runs = 0

    def __repr__(self) -> str:
        return f"<CredentialProvider {self.kind} for {self._config.origin}>"

    @property
    def kind(self) -> str:
        """``token-file``, ``token``, ``basic``, ``exec`` or ``none``."""
        if self._file:
            return "token-file"
        if self._config.token:
            return "token"
        if self._config.username:
            return "basic"
        return "exec" if self._exec else "none"

    @property
    def uses_plugin(self) -> bool:
        """True when requests are authenticated by an exec plugin's output."""
        return self._exec is not None

    @property
    def client_certificate(self) -> tuple[bytes, bytes] | None:
        """The client certificate and key (PEM) an exec plugin returned, if any."""
        credential = self._credential
        if credential is None or credential.client_certificate_data is None:
            return None
        assert credential.client_key_data is not None
        return credential.client_certificate_data, credential.client_key_data

    def plugin_run(self, wall: float) -> PluginRun | None:
        """The plugin run needed before the next request (``wall``: epoch seconds), or None."""
        exec_config = self._exec
        if exec_config is None:
            return None
        credential = self._credential
        if credential is not None and not self._stale and not credential.expired(wall):
            return None
        if exec_config.interactive_mode == "Always":
            raise ConfigError(
                "the exec plugin requires an interactive terminal", **self._where(exec_config)
            )
        env = dict(os.environ)
        env.update(exec_config.env)
        env["KUBERNETES_EXEC_INFO"] = exec_info(exec_config, self._cluster_info(exec_config))
        return PluginRun(
            argv=(exec_config.command, *exec_config.args),
            env=env,
            command=exec_config.command,
            timeout=self._plugin_timeout,
        )

    def receive_plugin_output(self, returncode: int, stdout: bytes) -> None:
        """Take the result of :meth:`plugin_run`'s run; raises ``ConfigError`` if unusable."""
        exec_config = self._exec
        assert exec_config is not None, "no exec plugin is configured"
        self.plugin_runs += 1
        where = self._where(exec_config)
        if len(stdout) > PLUGIN_OUTPUT_LIMIT:  # it was stopped for that: check it first
            raise ConfigError(
                f"the exec plugin printed more than {PLUGIN_OUTPUT_LIMIT} bytes", **where
            )
        if returncode != 0:
            raise ConfigError(f"the exec plugin exited with code {returncode}", **where)
        credential = parse_exec_credential(stdout, exec_config)
        if credential.token is None and credential.client_certificate_data is None:
            raise ConfigError("the exec plugin returned no token and no certificate", **where)
        self._credential = credential
        self._stale = False
        self._token = credential.token or ""
        self._generation += 1

    def plugin_failed(self, reason: str) -> ConfigError:
        """The error to raise when the plugin could not run (``reason``: why, no secrets)."""
        exec_config = self._exec
        assert exec_config is not None, "no exec plugin is configured"
        self.plugin_runs += 1
        hint = _printable(exec_config.install_hint.strip()) if exec_config.install_hint else ""
        suffix = f" ({hint})" if hint else ""
        return ConfigError(
            f"cannot run the exec plugin: {reason}{suffix}", **self._where(exec_config)
        )

    def header(self) -> tuple[str | None, int]:
        """The ``Authorization`` value to send (or None) and the generation it belongs to."""
        config = self._config
        value: str | None
        if self._file is not None:
            self._note(self._file.read())
            value = f"Bearer {self._token}"
        elif config.token:
            value = f"Bearer {config.token}"
        elif config.username:  # a username alone is sent with an empty password (client-go)
            raw = f"{config.username}:{config.password or ''}".encode()
            value = f"Basic {base64.b64encode(raw).decode()}"
        elif self._exec is not None and self._token:
            value = f"Bearer {self._token}"
        else:
            value = None
        if value is not None and _HEADER_SAFE.fullmatch(value) is None:
            # Never echo it: the HTTP layer would quote the whole header in its error.
            # With a plugin configured no static credential exists: the plugin printed it.
            where = self._where(self._exec) if self._exec is not None else {"file": config.source}
            raise ConfigError(
                "the credential contains characters not allowed in an HTTP header", **where
            )
        return value, self._generation

    def refresh(self, generation: int) -> bool:
        """React to a 401 answered to credentials of ``generation``; True if a retry may help.

        For an exec plugin this only marks the credential stale: the next
        :meth:`plugin_run` asks for a run.
        """
        if self._file is not None:
            before = self._generation
            self._note(self._file.read(force=True))
            return self._generation != before or generation != self._generation
        if self._exec is not None:
            if generation == self._generation:
                self._stale = True
            return True
        return False

    def _where(self, exec_config: ExecConfig) -> dict[str, str]:
        return {"file": exec_config.source, "key": f"exec {exec_config.command}"}

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


def _printable(text: str) -> str:
    """``text`` without control characters (a kubeconfig must not drive the terminal)."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)
