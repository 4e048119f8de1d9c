"""The informer: the core ``Reflector`` driven in real time by the trio adapter.

Rules: all Kubernetes decisions (what to request, when, what a failure means, when a watch
has stalled) belong to the reflector; this loop only performs its requests with the
client, feeds back responses, bytes, ends and the time (``current_time()``, monotonic),
and sleeps until ``next_deadline()``. A watch runs on a connection of its own; a stall,
an error or a cancellation closes it, and the reflector is always told how it ended, so it
never loses track of a connection.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence

from kubemoon_core import APIResource, GroupVersionResource, Request
from kubemoon_core._backoff import Backoff
from kubemoon_core._changes import Change
from kubemoon_core._kept_out import KeptOut
from kubemoon_core._reflector import MAX_WATCH_TIMEOUT, MIN_WATCH_TIMEOUT, Reflector
from kubemoon_core._store import Store
from kubemoon_core.errors import CacheSyncTimeout, LocalProtocolError
from kubemoon_core.sharding import ShardSelector
from kubemoon_io import ResponseTooLarge, TransportError, TransportTimeout, _tracing

from . import _backend
from ._client import Client

__all__ = ["Informer"]

logger = logging.getLogger("kubemoon.informer")

ChangeHandler = Callable[[Change], object]
FailureHandler = Callable[[str, BaseException | None], object]
"""Told ``(verb, error)`` after each LIST or WATCH attempt; ``error`` None on success."""


class Informer:
    """Keeps a :class:`~kubemoon_core.lowlevel.Store` in sync with a collection, in real time.

    Run it with ``await informer.run()`` (until cancelled, or until ``until()`` holds);
    read :attr:`store`; ``await informer.wait_synced()`` for the first complete list.
    ``on_change`` (and every handler added with :meth:`add_handler`) is called with every
    change the reflector applies, in order (bookmarks never produce one); a handler that
    raises is logged and counted (``handler_errors``) and the informer keeps running.
    ``on_failure`` hears how each LIST and WATCH attempt went. With ``metadata_only`` the
    cache holds each object's metadata only (``PartialObjectMetadata``). The reflector's options
    (``stall_margin``, ``watch_timeout``, ``backoff``,
    ``streaming_list``...) are passed through, or a configured ``reflector`` is given.
    ``shard_selector`` watches one shard of the collection (server-side with the
    ``ShardedListAndWatch`` gate, and always filtered client-side too; the first object
    the server sends outside the shard is logged once, as a warning). With ``compact``
    the informer makes its own ``Store(compact=True)``: objects kept as JSON bytes (about
    a third of the memory), every read decodes a fresh copy.
    :meth:`reselect` switches the shard and label selectors while it runs (a relist);
    with ``held`` it requests nothing until the first :meth:`reselect` (a sharded
    controller's replica that has no range yet).
    """

    def __init__(
        self,
        client: Client,
        resource: GroupVersionResource | APIResource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_change: ChangeHandler | None = None,
        on_failure: FailureHandler | None = None,
        store: Store | None = None,
        page_size: int = 500,
        streaming_list: bool = False,
        backoff: Backoff | None = None,
        stall_margin: float = 30.0,
        watch_timeout: tuple[int, int] = (MIN_WATCH_TIMEOUT, MAX_WATCH_TIMEOUT),
        rng: random.Random | None = None,
        reflector: Reflector | None = None,
        metadata_only: bool = False,
        shard_selector: ShardSelector | None = None,
        compact: bool = False,
        held: bool = False,
    ) -> None:
        if compact:
            if reflector is not None or (store is not None and not store.compact):
                raise LocalProtocolError(
                    "compact=True makes the informer's own store: pass no store or reflector"
                )
            store = store if store is not None else Store(compact=True)
        self._client = client
        gvr = resource.gvr if isinstance(resource, APIResource) else resource
        self.resource = gvr
        self.namespace = namespace
        self._name = f"{gvr.resource}.{gvr.group}" if gvr.group else gvr.resource
        if namespace:
            self._name += f" in {namespace}"
        if reflector is None:
            reflector = Reflector(
                resource,
                rng=rng if rng is not None else random.Random(),
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                store=store,
                page_size=page_size,
                streaming_list=streaming_list,
                backoff=backoff,
                stall_margin=stall_margin,
                watch_timeout=watch_timeout,
                metadata_only=metadata_only,
                shard_selector=shard_selector,
            )
        self.reflector = reflector
        self._handlers: list[ChangeHandler] = [on_change] if on_change is not None else []
        self._on_failure = on_failure
        self._synced = _backend.Event()
        self._filtering_reported = False
        self._kept_seq = 0
        self._kept_logged: set[object] = set()
        self.handler_errors = 0
        self._held = held
        self._pending: tuple[ShardSelector | None, str | None] | None = None
        self._reselected = _backend.Event()
        self._drive_group: _backend.TaskGroup | None = None

    def __repr__(self) -> str:
        return f"<Informer {self.reflector.state.name} rv={self.reflector.resource_version!r}>"

    @property
    def store(self) -> Store:
        """The cache: complete lists only, updated by every watch event."""
        return self.reflector.store

    @property
    def has_synced(self) -> bool:
        """True once the first complete list has been applied."""
        return self.reflector.has_synced

    @property
    def name(self) -> str:
        """The resource (``plural.group``) and, if any, the namespace, for logs and metrics."""
        return self._name

    def set_failure_handler(self, handler: FailureHandler | None) -> None:
        """Tell ``handler`` how each LIST and WATCH attempt went (replaces ``on_failure``)."""
        self._on_failure = handler

    def add_handler(self, handler: ChangeHandler) -> None:
        """Call ``handler`` with every change from now on (after those already added)."""
        self._handlers.append(handler)

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until the first complete list has been applied (the informer must run).

        With ``timeout``, raise :class:`~kubemoon_core.errors.CacheSyncTimeout` carrying the last
        error (a 403, a 404...) if the list has not completed by then.
        """
        if timeout is None:
            await self._synced.wait()
            return
        if not await _backend.wait_event(self._synced, _backend.current_time() + timeout):
            raise CacheSyncTimeout(
                f"{self.name}: not synced after {timeout:g} s",
                last_error=self.reflector.last_error,
            )

    @property
    def shard_selector(self) -> ShardSelector | None:
        """The shard selector requests are made with (the pending one after reselect)."""
        if self._pending is not None:
            return self._pending[0]
        return self.reflector.shard_selector

    @property
    def label_selector(self) -> str | None:
        """The label selector requests are made with (the pending one after reselect)."""
        if self._pending is not None:
            return self._pending[1]
        return self.reflector.label_selector

    def reselect(self, shard_selector: ShardSelector | None, label_selector: str | None) -> None:
        """List and watch with these selectors from now on: the request in flight is
        abandoned and the cache is relisted; objects no longer selected leave it as
        deletions (a sharded controller knows them for objects leaving its ranges)."""
        if (shard_selector, label_selector) == (self.shard_selector, self.label_selector) and (
            not self._held
        ):
            return
        self._pending = (shard_selector, label_selector)
        self._held = False
        self._reselected.set()
        group = self._drive_group  # read once: on the blocking adapter another thread runs
        if group is not None:
            group.cancel()

    def relist(self) -> None:
        """List again from now on, with the same selectors (a consistent read: no
        resourceVersion); the request in flight is abandoned. Nothing while held."""
        if self._held:
            return
        self._pending = (self.shard_selector, self.label_selector)
        self._reselected.set()
        group = self._drive_group  # read once: on the blocking adapter another thread runs
        if group is not None:
            group.cancel()

    async def run(self, *, until: Callable[[], bool] | None = None) -> None:
        """Drive the reflector until cancelled, or until ``until()`` returns True.

        ``until`` is checked after every request and every chunk of a watch.
        """
        while until is None or not until():
            if self._held:
                await self._reselected.wait()
                self._reselected = _backend.Event()
                continue
            pending, self._pending = self._pending, None
            if pending is not None:
                self.reflector.reselect(
                    _backend.current_time(), shard_selector=pending[0], label_selector=pending[1]
                )
            async with _backend.TaskGroup() as group:
                self._drive_group = group
                try:
                    await self._drive(until)
                finally:
                    self._drive_group = None
            if self._pending is None:
                return

    async def _drive(self, until: Callable[[], bool] | None) -> None:
        reflector = self.reflector
        while (until is None or not until()) and self._pending is None:
            now = _backend.current_time()
            request = reflector.next_request(now)
            if request is None:
                deadline = reflector.next_deadline()
                assert deadline is not None, "an idle reflector always has a deadline"
                await _backend.sleep_until(deadline)
            elif request.stream:
                await self._watch(request, until)
            else:
                await self._list_page(request)

    @property
    def kept_out(self) -> list[KeptOut]:
        """The objects the server holds that this cache keeps out (too deeply nested to
        decode, or not storable): not cached, never reconciled. Each is logged at ERROR
        once, is a ``/readyz`` reason of the manager and counts in
        ``kubemoon_reflector_kept_out_objects``."""
        return list(self.reflector.kept_out.values())

    def _report_kept_out(self) -> None:
        kept = self.reflector.kept_out
        for key, record in kept.items():
            if (key, record.reason) not in self._kept_logged:
                logger.error(
                    "%s: %s is kept out of the cache and not reconciled: %s",
                    self.name,
                    record.key if record.key is not None else "an unnamed object",
                    record.reason,
                    extra={"key": str(record.key)},
                )
        # Bounded: only the records held now are remembered.
        self._kept_logged = {(key, record.reason) for key, record in kept.items()}

    def _publish(self, changes: Sequence[Change]) -> None:
        if self.reflector.kept_out_seq != self._kept_seq:
            self._kept_seq = self.reflector.kept_out_seq
            self._report_kept_out()
        if self.reflector.has_synced and not self._synced.is_set():
            self._synced.set()
        if not self._filtering_reported and self.reflector.out_of_shard:
            self._filtering_reported = True
            logger.warning(
                "%s: the server sent objects outside the shard selector (the "
                "ShardedListAndWatch gate is off, or not on every apiserver); filtering "
                "client-side: each replica still receives the whole collection",
                self.name,
            )
        for handler in self._handlers:
            for change in changes:
                try:
                    handler(change)
                except Exception:  # user code must not stop the informer
                    self.handler_errors += 1
                    logger.exception("a change handler of %s failed on %s", self.name, change.key)

    def _report(self, verb: str, error: BaseException | None) -> None:
        if self._on_failure is not None:
            self._on_failure(verb, error)

    @_tracing.traced_informer("list")
    async def _list_page(self, request: Request) -> None:
        reflector = self.reflector
        try:
            response = await self._client.send(request)
        except ResponseTooLarge as exc:
            # The reflector asks for the page again with half the limit, down to 1.
            limit = reflector.page_limit
            reflector.request_failed(_backend.current_time(), exc, too_large=True)
            if reflector.page_limit < limit:
                logger.warning(
                    "LIST %s: a page of %d objects exceeded the client's body cap; "
                    "asking for %d at a time for the rest of this list",
                    request.path,
                    limit,
                    reflector.page_limit,
                )
            else:
                logger.error("LIST %s failed: %s", request.path, exc)
                self._report("list", exc)
            return
        except TransportError as exc:
            logger.info("LIST %s failed: %s", request.path, exc)
            reflector.request_failed(_backend.current_time(), exc)
            self._report("list", exc)
            return
        except BaseException as exc:  # cancelled: leave the reflector consistent
            reflector.request_failed(_backend.current_time(), exc)
            raise
        self._publish(reflector.receive_response(response, _backend.current_time()))
        self._report("list", None if response.ok else reflector.last_error)

    @_tracing.traced_informer("watch")
    async def _watch(self, request: Request, until: Callable[[], bool] | None) -> None:
        reflector = self.reflector
        deadline = reflector.next_deadline()
        # Blocking reads cannot stop at a deadline: they time out after the stall window,
        # which every byte received restarts, as the reflector's own stall clock does.
        window = None if deadline is None else max(deadline - _backend.current_time(), 0.001)
        try:
            stream = await self._client.open_stream(request, read_timeout=window)
        except BaseException as exc:
            reflector.watch_ended(_backend.current_time(), exc)
            if isinstance(exc, TransportError):
                logger.info("WATCH %s failed to start: %s", request.path, exc)
                self._report("watch", exc)
                return
            raise
        error: BaseException | None = None
        ok = False
        try:
            reflector.receive_watch_head(
                stream.status_code, stream.headers, _backend.current_time()
            )
            ok = 200 <= stream.status_code < 300
            while not reflector.poll(_backend.current_time()):
                deadline = reflector.next_deadline()
                try:
                    data = await stream.receive(deadline)
                except TransportTimeout as exc:
                    # The read waited until the stall deadline: the stream is unusable now.
                    late = max(_backend.current_time(), deadline or 0.0)
                    if not reflector.poll(late):
                        error = exc
                    break
                if not data:
                    break
                self._publish(reflector.receive_watch_data(data, _backend.current_time()))
                if until is not None and until():
                    break
        except TransportError as exc:
            error = exc
            logger.info("WATCH %s broke: %s", request.path, exc)
        except BaseException as exc:
            error = exc
            raise
        finally:
            await stream.aclose()
            reflector.watch_ended(_backend.current_time(), error)
            # Cancellation (a stop) is not a failure of the watch: nothing to report.
            if error is None or isinstance(error, Exception):
                # An error answer's Status is known only once its body is read and the
                # watch ended.
                self._report("watch", error if ok else (reflector.last_error or error))
