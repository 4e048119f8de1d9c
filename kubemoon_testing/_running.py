"""Run a Manager for the length of a test and stop it cleanly.

Rules of this module:

- :func:`running_manager` works on trio and on asyncio alike (it uses anyio, which the
  ``testing`` extra installs, so it runs inside pytest-trio, pytest-asyncio and anyio tests);
  :func:`running_manager_in_thread` runs a blocking ``kubemoon_sync`` Manager in a thread.
- Entering returns once the Manager leads (when it elects) and every cache has synced, or
  raises the Manager's own timeout error. Leaving calls ``Manager.stop()`` and waits until
  ``run`` has returned: reconciles drained, the Lease released, every task ended.
- A Manager that fails while the test runs (a lost Lease, say) ends the test with that
  error, not with a group of them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Protocol, TypeVar

from kubemoon_core import KubeMoonError

__all__ = ["ManagerStopTimeout", "running_manager", "running_manager_in_thread"]


class ManagerStopTimeout(KubeMoonError):
    """A Manager's ``run()`` had not returned in time after ``stop()``."""


class _AsyncManager(Protocol):
    async def run(self) -> None: ...

    def stop(self) -> None: ...

    async def wait_leading(self, timeout: float | None = None) -> None: ...

    async def wait_synced(self, timeout: float | None = None) -> None: ...


class _BlockingManager(Protocol):
    def run(self) -> None: ...

    def stop(self) -> None: ...

    def wait_leading(self, timeout: float | None = None) -> None: ...

    def wait_synced(self, timeout: float | None = None) -> None: ...


AsyncManagerT = TypeVar("AsyncManagerT", bound=_AsyncManager)
BlockingManagerT = TypeVar("BlockingManagerT", bound=_BlockingManager)


@contextlib.asynccontextmanager
async def running_manager(
    manager: AsyncManagerT, *, timeout: float = 30.0
) -> AsyncIterator[AsyncManagerT]:
    """Run a ``kubemoon_trio`` or ``kubemoon_asyncio`` Manager while the block runs::

        async with running_manager(manager):
            ...  # the manager leads, its caches are synced, its controllers reconcile

    ``timeout`` bounds the wait for leadership and for the caches to sync.
    """
    import anyio  # noqa: PLC0415 (the testing extra, needed only here)

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(manager.run)
            try:
                await manager.wait_leading(timeout)
                await manager.wait_synced(timeout)
                yield manager
            finally:
                manager.stop()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


@contextlib.contextmanager
def running_manager_in_thread(
    manager: BlockingManagerT, *, timeout: float = 30.0
) -> Iterator[BlockingManagerT]:
    """Run a blocking ``kubemoon_sync`` Manager in a thread while the block runs; on
    leaving, stop it and wait up to ``timeout`` seconds for ``run`` to return (an error
    it ended with is raised here)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            manager.run()
        except BaseException as exc:  # handed to the test's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="kubemoon-test-manager", daemon=True)
    thread.start()
    try:
        manager.wait_leading(timeout)
        manager.wait_synced(timeout)
        yield manager
    finally:
        manager.stop()
        thread.join(timeout)
    if thread.is_alive():
        raise ManagerStopTimeout(f"the Manager's run() did not return {timeout:g} s after stop()")
    if failure:
        raise failure[0]
