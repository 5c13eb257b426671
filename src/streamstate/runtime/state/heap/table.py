"""Per-state tables of the heap backend.

A :class:`StateTable` holds one state's objects: per namespace, a list indexed
by ``key_group - range.start`` of plain dicts ``{key: value}``. The value is
the state object itself (a value, a list of elements, a dict for map state, a
reduced value or an accumulator). Handles grab the list of the void namespace
once, so an access is ``maps[kgi].get(key)``.

Delta tracking is one dict per namespace, ``dirty[key] = kgi``, written on
every mutation (a key belongs to exactly one key group). At delta time an entry
still present is written as a put, an absent one as a tombstone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamstate.runtime.state.format.namespaces import VOID_NAMESPACE
from streamstate.runtime.state.format.serializers import STATE_KINDS, StateSerializers

__all__ = ["StateTable"]


class StateTable:
    """All objects of one state for the key groups of one backend."""

    __slots__ = (
        "name",
        "kind",
        "size",
        "serializers",
        "namespaces",
        "dirty",
        "restored_meta",
        "handles",
    )

    def __init__(self, name: str, kind: str, size: int, serializers: StateSerializers) -> None:
        if kind not in STATE_KINDS:
            raise ValueError(f"unknown state kind {kind!r}")
        self.name = name
        self.kind = kind
        #: number of key groups (length of every per-namespace list)
        self.size = size
        self.serializers = serializers
        #: namespace -> [ {key: value} per key group ]
        self.namespaces: dict[Any, list[dict[Any, Any]]] = {}
        #: namespace -> {key: kgi} of entries changed since the last mark
        self.dirty: dict[Any, dict[Any, int]] = {}
        #: the state's metadata when it came from a checkpoint (for compatibility checks)
        self.restored_meta: dict[str, Any] | None = None
        #: the state handles bound to this table (rebound when their namespace is pruned)
        self.handles: list[Any] = []
        self.maps(VOID_NAMESPACE)

    def maps(self, namespace: Any) -> list[dict[Any, Any]]:
        """The per-key-group dicts of ``namespace`` (created empty on first use)."""
        m = self.namespaces.get(namespace)
        if m is None:
            m = self.namespaces[namespace] = [{} for _ in range(self.size)]
            self.dirty[namespace] = {}
        return m

    def dirty_of(self, namespace: Any) -> dict[Any, int]:
        self.maps(namespace)
        return self.dirty[namespace]

    def clear_dirty(self) -> None:
        """Forget all changes (after a snapshot or delta has captured them).

        Also drops namespaces other than the void one that hold no entry any
        more (windows that were purged), so per-window state does not leave an
        empty namespace behind for every window ever used. A handle whose
        namespace was dropped is rebound (re-creating just that namespace).
        """
        for d in self.dirty.values():
            d.clear()
        if len(self.namespaces) > 1:
            empty = [
                ns
                for ns, maps in self.namespaces.items()
                if ns is not VOID_NAMESPACE and not any(maps)
            ]
            for ns in empty:
                del self.namespaces[ns]
                del self.dirty[ns]
            if empty:
                for h in self.handles:
                    if h._namespace not in self.namespaces:
                        h.set_current_namespace(h._namespace)

    def has_changes(self) -> bool:
        return any(self.dirty.values())

    def keys(self, namespace: Any = VOID_NAMESPACE) -> list[Any]:
        """A copy of the keys with a value in ``namespace``, in key group order."""
        maps = self.namespaces.get(namespace)
        if maps is None:
            return []
        out: list[Any] = []
        for m in maps:
            if m:
                out.extend(m)
        return out

    def keys_and_namespaces(self) -> list[tuple[Any, Any]]:
        """A copy of every ``(key, namespace)`` with a value, in key group order."""
        out: list[tuple[Any, Any]] = []
        for kgi in range(self.size):
            for ns, maps in self.namespaces.items():
                out.extend((key, ns) for key in maps[kgi])
        return out

    def entries(self, kgi: int) -> Iterator[tuple[Any, dict[Any, Any]]]:
        """``(namespace, {key: value})`` of key group index ``kgi``, non-empty only."""
        for ns, maps in self.namespaces.items():
            m = maps[kgi]
            if m:
                yield ns, m

    def meta(self) -> dict[str, Any]:
        """JSON-compatible description recorded in snapshots."""
        return {"name": self.name, "kind": self.kind, **self.serializers.to_meta()}

    def clear_all(self) -> None:
        self.namespaces.clear()
        self.dirty.clear()
        self.maps(VOID_NAMESPACE)

    def __len__(self) -> int:
        """Number of (namespace, key) entries."""
        return sum(len(m) for maps in self.namespaces.values() for m in maps)
