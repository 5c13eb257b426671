"""``GET /jobs/<id>/state/<name>?key=...``: queryable state over the REST API.

Query parameters: ``key`` (repeat it for a batch, all answered as of one cut), ``as_of``
(``epoch``, the default, or ``checkpoint``) and ``key_type``: ``auto`` (the default: an
integer for a job keyed by ``Types.INT()``/``Types.LONG()``..., else the string as given),
``str``, ``int``, ``float`` or ``json`` (lists become tuples). The answer is JSON:
``{"as_of", "epoch", "checkpoint_id", "values": [{"key", "value"}]}``; values that are not
JSON become their ``repr``. Errors: 404 unknown job or state name, 400 a bad key or a state
that is not queryable, 503 not available yet (retry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from streamstate.errors import (
    QueryableStateError,
    StateNotAvailableYetError,
    StreamStateError,
    UnknownKvStateError,
    WrongKeyTypeError,
)
from streamstate.runtime.queryable.service import service_of

__all__ = ["query_state"]

_INT_KEYS = ("int", "long", "short", "byte", "big_int")
_FLOAT_KEYS = ("double", "float")


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _parse(raw: str, key_type: str, serializer_name: str) -> Any:
    if key_type == "auto":
        key_type = (
            "int"
            if serializer_name in _INT_KEYS
            else "float"
            if serializer_name in _FLOAT_KEYS
            else "str"
        )
    try:
        if key_type == "str":
            return raw
        if key_type == "int":
            return int(raw)
        if key_type == "float":
            return float(raw)
        if key_type == "json":
            return _tuples(json.loads(raw))
    except ValueError as e:
        raise WrongKeyTypeError(f"key {raw!r} is not a {key_type}: {e}") from e
    raise WrongKeyTypeError(f"key_type must be auto, str, int, float or json, got {key_type!r}")


def _jsonable(v: Any) -> Any:
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        if isinstance(v, dict):
            return {str(k): _jsonable(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [_jsonable(x) for x in v]
        return repr(v)


def query_state(job_id: str, name: str, params: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON document) of one lookup; runs on a worker thread."""
    service = service_of(job_id)
    if service is None:
        return 404, {"errors": [f"job {job_id} is not running in this process"]}
    given = params.getlist("key") if hasattr(params, "getlist") else [params.get("key")]
    raw_keys = [str(k) for k in given if k is not None]
    if not raw_keys:
        return 400, {"errors": ["give at least one key: ?key=<key> (repeat for a batch)"]}
    try:
        op = service.resolve(name)[0]
        key_type = str(params.get("key_type", "auto"))
        keys = [_parse(k, key_type, op.key_serializer.name) for k in raw_keys]
        answer = service.lookup(name, keys, as_of=str(params.get("as_of", "epoch")))
    except UnknownKvStateError as e:
        return 404, {"errors": [str(e)], "type": type(e).__name__}
    except StateNotAvailableYetError as e:
        return 503, {"errors": [str(e)], "type": type(e).__name__}
    except (QueryableStateError, StreamStateError) as e:
        return 400, {"errors": [str(e)], "type": type(e).__name__}
    return 200, {
        "as_of": answer.as_of,
        "epoch": answer.epoch,
        "checkpoint_id": answer.checkpoint_id,
        "values": [
            {"key": _jsonable(k), "value": _jsonable(v)}
            for k, v in zip(keys, answer.values, strict=True)
        ],
    }
