"""A TTL probe job and a reference model of its expected output (importable by Spark workers).

Each element ``(key, seq)`` is either a write (``seq % 4 == 0``) or a read. For
every state configuration in :data:`CONFIGS` the probe reads the state first
(the observation it emits) and then, for a write, writes ``seq``. The TTL clock
is the deterministic epoch clock (``epoch * STEP_MS``), so :func:`model`
replays the per-key observations from the emitted epochs alone and predicts
every observation with Flink's TTL rules.
"""

from __future__ import annotations

from typing import Any

from streamstate.common.time import Time
from streamstate.common.typeinfo import Types
from streamstate.datastream import KeyedProcessFunction
from streamstate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)

TTL_MS = 2500
STEP_MS = 1000
CLOCK = f"epoch:0:{STEP_MS}"

UT = StateTtlConfig.UpdateType
SV = StateTtlConfig.StateVisibility

#: name -> (kind, update type, visibility, background cleanup)
CONFIGS: dict[str, tuple[str, Any, Any, bool]] = {
    "v_cw_never": ("value", UT.OnCreateAndWrite, SV.NeverReturnExpired, False),
    "v_cw_return": ("value", UT.OnCreateAndWrite, SV.ReturnExpiredIfNotCleanedUp, False),
    "v_rw_never": ("value", UT.OnReadAndWrite, SV.NeverReturnExpired, False),
    "v_rw_return": ("value", UT.OnReadAndWrite, SV.ReturnExpiredIfNotCleanedUp, False),
    # incremental background cleanup is unobservable with NeverReturnExpired
    "l_cw_never": ("list", UT.OnCreateAndWrite, SV.NeverReturnExpired, True),
    "m_rw_return": ("map", UT.OnReadAndWrite, SV.ReturnExpiredIfNotCleanedUp, False),
}


def ttl_config(update: Any, visibility: Any, background: bool) -> StateTtlConfig:
    b = StateTtlConfig.new_builder(Time.milliseconds(TTL_MS)).set_update_type(update)
    b.set_state_visibility(visibility)
    if not background:
        b.disable_cleanup_in_background()
    return b.build()


def descriptor(name: str) -> Any:
    kind, update, visibility, background = CONFIGS[name]
    if kind == "value":
        d: Any = ValueStateDescriptor(name, Types.LONG())
    elif kind == "list":
        d = ListStateDescriptor(name, Types.LONG())
    else:
        d = MapStateDescriptor(name, Types.LONG(), Types.LONG())
    d.enable_time_to_live(ttl_config(update, visibility, background))
    return d


def is_write(seq: int) -> bool:
    return seq % 4 == 0


def events(n: int, keys: int, burst: int) -> list[tuple[str, int]]:
    """Keys come in bursts of ``burst`` elements, so each key idles for a while."""
    return [(f"k{(i // burst) % keys}", i) for i in range(n)]


class TtlProbe(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.ctx = ctx
        self.states = {}
        for name, (kind, *_rest) in CONFIGS.items():
            d = descriptor(name)
            if kind == "value":
                self.states[name] = ctx.get_state(d)
            elif kind == "list":
                self.states[name] = ctx.get_list_state(d)
            else:
                self.states[name] = ctx.get_map_state(d)

    def process_element(self, value: Any, ctx: Any) -> Any:
        key, seq = value
        seen = {}
        for name, (kind, *_rest) in CONFIGS.items():
            s = self.states[name]
            if kind == "value":
                seen[name] = s.value()
                if is_write(seq):
                    s.update(seq)
            elif kind == "list":
                seen[name] = tuple(s.get())
                if is_write(seq):
                    s.add(seq)
            else:
                seen[name] = tuple(sorted(s.items()))
                if is_write(seq):
                    s.put(seq % 3, seq)
        yield key, seq, self.ctx.epoch, tuple(sorted(seen.items()))


def _alive(ts: int, now: int) -> bool:
    return ts + TTL_MS > now


def model(outputs: list[Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """Expected observations per (key, seq), replaying each key's elements in output order."""
    expected: dict[tuple[str, int], dict[str, Any]] = {}
    per_key: dict[str, list[Any]] = {}
    for out in outputs:
        per_key.setdefault(out[0], []).append(out)
    for key, outs in per_key.items():
        stores: dict[str, Any] = {
            n: (None if c[0] == "value" else ([] if c[0] == "list" else {}))
            for n, c in CONFIGS.items()
        }
        for _, seq, epoch, _seen in outs:
            now = epoch * STEP_MS
            obs: dict[str, Any] = {}
            for name, (kind, update, visibility, _bg) in CONFIGS.items():
                rw = update is UT.OnReadAndWrite
                ret = visibility is SV.ReturnExpiredIfNotCleanedUp
                st = stores[name]
                if kind == "value":
                    if st is None:
                        obs[name] = None
                    elif _alive(st[1], now):
                        obs[name] = st[0]
                        if rw:
                            stores[name] = (st[0], now)
                    else:
                        obs[name] = st[0] if ret else None
                        stores[name] = None
                    if is_write(seq):
                        stores[name] = (seq, now)
                elif kind == "list":
                    live = [(v, t) for v, t in st if _alive(t, now)]
                    obs[name] = tuple(v for v, _ in (st if ret else live))
                    if rw:
                        live = [(v, now) for v, _ in live]
                    if is_write(seq):
                        live.append((seq, now))
                    stores[name] = live
                else:
                    seen = []
                    nxt = {}
                    for k, (v, t) in st.items():
                        if _alive(t, now):
                            seen.append((k, v))
                            nxt[k] = (v, now if rw else t)
                        elif ret:
                            seen.append((k, v))
                    obs[name] = tuple(sorted(seen))
                    if is_write(seq):
                        nxt[seq % 3] = (seq, now)
                    stores[name] = nxt
            expected[(key, seq)] = obs
    return expected
