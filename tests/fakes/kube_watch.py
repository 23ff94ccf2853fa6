"""Watches (`?watch=true` on a list or an object) as kube-apiserver 1.36 serves them.

Every write to the fake's store is recorded as an event with its resourceVersion
(`WatchedStore`); a watch streams the events after its starting point as chunked JSON, one
`{"type": ..., "object": ...}` per line (k8s.io/apiserver pkg/endpoints/handlers/watch.go
`serveWatchHandler`: `Content-Type: application/json`, `Transfer-Encoding: chunked`; the JSON
serializer ends each event with a newline). What the fake implements, each from upstream:

- The query is read and checked as `ListOptions` (k8s.io/apimachinery
  pkg/apis/meta/internalversion: `SetListOptionsDefaults`, validation/validation.go
  `validateWatchOptions`): a watch with `resourceVersion` unset or "0" is defaulted to
  `sendInitialEvents=true&resourceVersionMatch=NotOlderThan` (WatchList is on by default since
  1.34, k8s.io/apiserver pkg/features/kube_features.go); `sendInitialEvents` without
  `resourceVersionMatch=NotOlderThan`, or `resourceVersionMatch` without `sendInitialEvents`,
  is 422 `ListOptions.meta.k8s.io "" is invalid: ...`. A watch of one object
  (`.../pods/<name>?watch=true`) selects `metadata.name` (handlers/get.go `listOpts`).
- With initial events, the objects that match come first as ADDED; then, when
  `allowWatchBookmarks=true`, a BOOKMARK whose object carries only the resourceVersion and the
  annotation `k8s.io/initial-events-end: "true"` (pkg/storage/cacher/cache_watcher.go
  `convertToWatchEvent`, client-go tools/cache/reflector.go `watchList` waits for it).
- From a resourceVersion (`resourceVersion=N`, no initial events): the recorded changes after
  N. The record is a window of the last `HISTORY` changes, like the watch cache's; N older than
  it gets an ERROR event with a 410 `Expired` Status "too old resource version: N (M)"
  (cacher/watch_cache.go `getAllEventsSinceLocked`, served through `newErrWatcher`); N newer
  than the store gets, after 3 seconds, a 504 `Timeout` "Too large resource version: N,
  current: M" (pkg/storage/errors.go) the same way.
- Selectors apply to the object before and after a change (cache_watcher.go): a change that
  makes an object match is ADDED, one that makes it stop matching is DELETED (with the previous
  object and the change's resourceVersion). A deleted object is sent as it was, with the
  resourceVersion of its deletion.
- `timeoutSeconds` ends the stream (without it the server picks a time between its minimum
  request timeout, 1800 s, and twice that: handlers/get.go `handleWatch`). The stream also ends
  when the client goes away or the server stops.
- `as=Table` watches send each object as a one-row Table, the column definitions only in the
  first event (handlers/response.go `watchEmbeddedEncoder`).

Periodic bookmarks, which a server may send at its discretion, are not sent.
"""

from __future__ import annotations

import contextlib
import json
import random
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from fakes.kube_discovery import RefusedError

HISTORY = 1000
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
MIN_REQUEST_TIMEOUT = 1800.0  # kube-apiserver --min-request-timeout default
TOO_LARGE_WAIT = 3.0  # cacher waitUntilFreshAndBlock: blockTimeout


class Event(NamedTuple):
    """One change to the store."""

    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    key: str
    obj: dict  # the object after the change (before it, with the new rv, for DELETED)
    prev: dict | None


class WatchedStore(dict):
    """The fake's store: a dict of storage path -> object that records each change.

    Writes happen under the server's lock, which is also the lock of `changed`, so a watch
    waiting on `changed` wakes for each one. `next_rv` gives the resourceVersion of a deletion.
    """

    def __init__(self, lock: threading.RLock, next_rv: Callable[[], str]) -> None:
        super().__init__()
        self.changed = threading.Condition(lock)
        self.events: deque[Event] = deque(maxlen=HISTORY)
        self.first_rv = 0  # every change after this one is in `events`
        self._next_rv = next_rv
        self._quiet = False

    @contextlib.contextmanager
    def dry_run(self) -> Iterator[None]:
        """Writes inside are forgotten: no events, and the mapping is as it was after."""
        saved = dict(self)
        self._quiet = True
        try:
            yield
        finally:
            dict.clear(self)
            dict.update(self, saved)
            self._quiet = False

    def _record(self, event: Event) -> None:
        if self._quiet:
            return
        if len(self.events) == self.events.maxlen:
            self.first_rv = self.events[0].rv
        self.events.append(event)
        self.changed.notify_all()

    def __setitem__(self, key: str, obj: dict) -> None:
        prev = self.get(key)
        super().__setitem__(key, obj)
        rv = int((obj.get("metadata") or {}).get("resourceVersion") or 0)
        self._record(Event(rv, "ADDED" if prev is None else "MODIFIED", key, obj, prev))

    def __delitem__(self, key: str) -> None:
        self.pop(key)

    _MISSING = object()

    def pop(self, key: str, default: Any = _MISSING) -> Any:  # type: ignore[override]
        if key not in self:
            if default is self._MISSING:
                raise KeyError(key)
            return default
        obj = super().pop(key)
        rv = self._next_rv()
        gone = {**obj, "metadata": {**(obj.get("metadata") or {}), "resourceVersion": rv}}
        self._record(Event(int(rv), "DELETED", key, gone, obj))
        return obj


class Options(NamedTuple):
    """A watch request's options, checked and defaulted."""

    resource_version: str
    send_initial_events: bool
    bookmarks: bool
    timeout: float


def options(query: dict[str, str]) -> Options:
    """The watch's options, checked and defaulted; a 422 `RefusedError` for invalid ones."""
    rv = query.get("resourceVersion", "")
    match = query.get("resourceVersionMatch", "")
    initial = query.get("sendInitialEvents")
    if initial is None and not match and rv in ("", "0"):  # SetListOptionsDefaults
        initial, match = "true", "NotOlderThan"
    errors = []
    if initial is not None and match != "NotOlderThan":
        errors.append(
            (FORBIDDEN, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        )
    if match and initial is None:
        errors.append(
            (
                FORBIDDEN,
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )
        )
    if match and match != "NotOlderThan":
        errors.append((NOT_SUPPORTED, f'"{match}": supported values: "NotOlderThan"'))
    if match and query.get("continue"):
        errors.append((FORBIDDEN, "resourceVersionMatch is forbidden when continue is provided"))
    if errors:
        raise _invalid(errors)
    try:
        timeout = float(query.get("timeoutSeconds") or 0)
    except ValueError:
        timeout = 0.0
    if timeout <= 0:
        timeout = MIN_REQUEST_TIMEOUT * (random.random() + 1.0)
    bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
    return Options(rv, initial in ("true", "1"), bookmarks, timeout)


FORBIDDEN, NOT_SUPPORTED = (
    ("FieldValueForbidden", "Forbidden"),
    ("FieldValueNotSupported", "Unsupported value"),
)


def _invalid(errors: list[tuple[tuple[str, str], str]]) -> RefusedError:
    """422 for invalid ListOptions (apimachinery errors.NewInvalid, field.Error)."""
    field = "resourceVersionMatch"
    bodies = [f"{label}: {detail}" for (_, label), detail in errors]
    causes = [
        {"reason": r, "message": b, "field": field} for ((r, _), _), b in zip(errors, bodies)
    ]
    texts = [f"{field}: {b}" for b in bodies]
    text = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = {"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes}
    return RefusedError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {text}', details)


def field_selector(name: str | None, query: dict[str, str]) -> str:
    """A watch's field selector: a watch of one object selects its name (get.go `listOpts`)."""
    selector = query.get("fieldSelector") or ""
    if name is None:
        return selector
    if selector and selector.replace("==", "=") != f"metadata.name={name}":
        raise RefusedError(
            400, "BadRequest", "fieldSelector metadata.name doesn't match requested name"
        )
    return f"metadata.name={name}"


def _client_gone(sock: socket.socket) -> bool:
    """Whether the client closed the connection (it sends nothing else during a watch).

    A TLS socket cannot be peeked at: there, anything to read (a close_notify) means gone.
    """
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        if isinstance(sock, ssl.SSLSocket):
            return True
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    body.update(message=message, reason=reason, code=code)
    if details:
        body["details"] = details
    return body


class Watch:
    """One watch: `stream(sock)` yields the encoded events until it ends."""

    def __init__(
        self,
        store: WatchedStore,
        current_rv: Callable[[], int],
        matches: Callable[[dict], bool],
        opts: Options,
        bookmark: dict,
        running: Callable[[], bool] = lambda: True,
    ) -> None:
        """`matches`: whether an object is of the watched kind, namespace and selectors.

        `bookmark`: apiVersion and kind for BOOKMARK objects; `running`: False once the server
        stops. `transform` (set later): what each object is sent as (a Table row), given
        whether it is the first event.
        """
        self.store, self.current_rv, self.matches = store, current_rv, matches
        self.opts, self.bookmark, self.running = opts, bookmark, running
        self.transform: Callable[[dict, bool], dict] | None = None
        self._first = True

    def _encode(self, kind: str, obj: dict) -> bytes:
        if self.transform is not None and kind != "ERROR":
            obj = self.transform(obj, self._first)
            self._first = False
        return json.dumps({"type": kind, "object": obj}).encode() + b"\n"

    def _filtered(self, event: Event) -> tuple[str, dict] | None:
        now = event.type != "DELETED" and self.matches(event.obj)
        prev = event.prev or {}
        before = event.prev is not None and self.matches(prev)
        if now and not before:
            return "ADDED", event.obj
        if now and before:
            return "MODIFIED", event.obj
        if before:  # it stopped matching, or was deleted
            if event.type == "DELETED":
                return "DELETED", event.obj
            meta = {**(prev.get("metadata") or {}), "resourceVersion": str(event.rv)}
            return "DELETED", {**prev, "metadata": meta}
        return None

    def _start(self) -> tuple[list[bytes], int] | bytes:
        """The first events and the rv the stream goes on from, or an ERROR event."""
        with self.store.changed:
            now = self.current_rv()
            if self.opts.send_initial_events:
                objs = [o for _, o in sorted(self.store.items()) if self.matches(o)]
                lines = [self._encode("ADDED", o) for o in objs]
                if self.opts.bookmarks:
                    meta = {
                        "resourceVersion": str(now),
                        "annotations": {INITIAL_EVENTS_END: "true"},
                    }
                    lines.append(self._encode("BOOKMARK", {**self.bookmark, "metadata": meta}))
                return lines, now
            if self.opts.resource_version in ("", "0"):
                return [], now
            try:
                start = int(self.opts.resource_version)
            except ValueError:
                status = _status(
                    400, "BadRequest", f"invalid resource version: {self.opts.resource_version!r}"
                )
                return self._encode("ERROR", status)
            deadline = time.monotonic() + TOO_LARGE_WAIT
            while start > self.current_rv() and time.monotonic() < deadline:
                self.store.changed.wait(deadline - time.monotonic())
            if start > self.current_rv():
                message = f"Too large resource version: {start}, current: {self.current_rv()}"
                cause = {
                    "reason": "ResourceVersionTooLarge",
                    "message": "Too large resource version",
                }
                details = {"causes": [cause], "retryAfterSeconds": 1}
                return self._encode("ERROR", _status(504, "Timeout", message, details))
            oldest = self.store.events[0].rv if self.store.events else start + 1
            if self.store.first_rv and start < oldest - 1:  # some changes after it are gone
                message = f"too old resource version: {start} ({oldest - 1})"
                return self._encode("ERROR", _status(410, "Expired", message))
            return [], start

    def stream(self, sock: socket.socket) -> Iterator[bytes]:
        """The encoded events, until the timeout, the client leaving or the server stopping."""
        started = self._start()
        if isinstance(started, bytes):
            yield started
            return
        lines, seen = started
        yield from lines
        deadline = time.monotonic() + self.opts.timeout
        while time.monotonic() < deadline and self.running():
            with self.store.changed:
                pending = [e for e in self.store.events if e.rv > seen]
                if not pending:
                    self.store.changed.wait(min(0.25, max(0.0, deadline - time.monotonic())))
                    pending = [e for e in self.store.events if e.rv > seen]
                out = []
                for event in pending:
                    seen = max(seen, event.rv)
                    filtered = self._filtered(event)
                    if filtered is not None:
                        out.append(self._encode(*filtered))
            yield from out
            if not out and _client_gone(sock):
                return
