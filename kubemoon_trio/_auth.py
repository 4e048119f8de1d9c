"""Credentials for requests: the shared provider, with the exec plugin run on this loop.

Rules: every decision (precedence, caching, expiry, refresh after a 401) is
:class:`kubemoon_io.CredentialProvider`'s; this module only serialises plugin runs with a
lock and runs the plugin with a timeout and an output cap.
"""

from __future__ import annotations

import logging

from kubemoon_core._client_config import ClientConfig
from kubemoon_io import CredentialProvider

from . import _backend

__all__ = ["Credentials"]

logger = logging.getLogger("kubemoon.auth")


class Credentials:
    """Produces the ``Authorization`` header of one :class:`ClientConfig`."""

    def __init__(self, config: ClientConfig, *, plugin_timeout: float) -> None:
        self.provider = CredentialProvider(config, plugin_timeout=plugin_timeout)
        self._lock = _backend.Lock()

    def __repr__(self) -> str:
        return repr(self.provider)

    @property
    def exec_runs(self) -> int:
        """How many times the exec plugin was started."""
        return self.provider.plugin_runs

    async def authorization(self) -> tuple[str | None, int]:
        """The ``Authorization`` value to send (or None) and the generation it belongs to."""
        provider = self.provider
        if provider.uses_plugin:
            async with self._lock:
                run = provider.plugin_run(_backend.wall_time())
                if run is not None:
                    logger.debug("running exec credential plugin %s", run.command)
                    try:
                        code, output = await _backend.run_process(
                            run.argv, run.env, timeout=run.timeout, output_limit=run.output_limit
                        )
                    except TimeoutError:
                        raise provider.plugin_failed(
                            f"no answer within {run.timeout:g} s; the plugin was killed"
                        ) from None
                    except OSError as exc:
                        raise provider.plugin_failed(exc.strerror or type(exc).__name__) from None
                    except BaseException:
                        # The caller's deadline (a Lease renewal's) or a cancellation
                        # ended the run: say which plugin held the call up.
                        logger.warning(
                            "exec credential plugin %s was still running when its caller "
                            "gave up; it was killed",
                            run.command,
                        )
                        raise
                    provider.receive_plugin_output(code, output)
        return provider.header()

    async def refresh(self, generation: int) -> bool:
        """React to a 401 answered to credentials of ``generation``; True if a retry may help."""
        return self.provider.refresh(generation)
