"""Storage options: endpoint, credentials and region of the stores a job reads and writes.

A job's options come from its configuration, in Flink's keys where Flink has them:

=========================  =============================================================
``s3.endpoint``            the S3 server (``http://host:port``; no scheme: https)
``s3.access-key``          access key id
``s3.secret-key``          secret access key
``s3.endpoint.region``     the region to sign requests for
``s3.path.style.access``   ``true``: ``endpoint/bucket/key`` (most S3-compatible servers)
``fsspec.<proto>.<opt>``   any fsspec option of protocol ``<proto>`` (a JSON value, or a
                           string), e.g. ``fsspec.s3.client_kwargs: {"verify": false}``
=========================  =============================================================

Keys left out fall back to the AWS SDK's own sources (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL``, ``~/.aws``, an instance role). :meth:`StorageOptions.install` puts
them into fsspec's per-protocol defaults of this process, so every ``s3://`` access of the
job uses them, streamstate's and the user's own; the driver installs them when the job
starts, and every executor process before it runs the job's first task (the options travel
in the stage specs). They are per process: two jobs in one process with different S3
settings are not supported (docs/limitations.md).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from streamstate.errors import ConfigurationError

__all__ = [
    "FSSPEC_PREFIX",
    "S3_ACCESS_KEY",
    "S3_ENDPOINT",
    "S3_PATH_STYLE_ACCESS",
    "S3_REGION",
    "S3_SECRET_KEY",
    "StorageOptions",
    "ensure_installed",
]

S3_ENDPOINT = "s3.endpoint"
S3_ACCESS_KEY = "s3.access-key"
S3_SECRET_KEY = "s3.secret-key"
S3_REGION = "s3.endpoint.region"
S3_PATH_STYLE_ACCESS = "s3.path.style.access"
FSSPEC_PREFIX = "fsspec."

#: options streamstate sets for a protocol unless the job sets them: listings are never
#: cached (a driver lists what executors wrote: a cached listing would miss it)
_DEFAULTS: dict[str, dict[str, Any]] = {"s3": {"use_listings_cache": False}}


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


@dataclass(frozen=True)
class StorageOptions:
    """fsspec options per protocol (a frozen value; its repr hides secrets)."""

    #: protocol -> fsspec keyword arguments (JSON-like values)
    by_protocol: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"StorageOptions(protocols={sorted(self.by_protocol)})"

    @staticmethod
    def from_configuration(conf: Mapping[str, Any] | Any) -> StorageOptions:
        """The options of a Configuration (or a mapping of keys); a bad value raises
        :class:`ConfigurationError` naming the key."""
        items = conf.to_dict() if hasattr(conf, "to_dict") else dict(conf)
        s3: dict[str, Any] = {}
        client: dict[str, Any] = {}
        endpoint = _text(items, S3_ENDPOINT)
        if endpoint:
            client["endpoint_url"] = endpoint if "://" in endpoint else f"https://{endpoint}"
        region = _text(items, S3_REGION)
        if region:
            client["region_name"] = region
        if client:
            s3["client_kwargs"] = client
        key, secret = _text(items, S3_ACCESS_KEY), _text(items, S3_SECRET_KEY)
        if bool(key) != bool(secret):
            given, missing = (
                (S3_ACCESS_KEY, S3_SECRET_KEY) if key else (S3_SECRET_KEY, S3_ACCESS_KEY)
            )
            raise ConfigurationError(f"{given} is set but {missing} is not: set both or neither")
        if key:
            s3["key"], s3["secret"] = key, secret
        path_style = _text(items, S3_PATH_STYLE_ACCESS)
        if path_style:
            if path_style.lower() not in ("true", "false"):
                raise ConfigurationError(
                    f"{S3_PATH_STYLE_ACCESS} must be true or false, got {path_style!r}"
                )
            style = "path" if path_style.lower() == "true" else "virtual"
            s3["config_kwargs"] = {"s3": {"addressing_style": style}}
        by_protocol: dict[str, dict[str, Any]] = {"s3": s3} if s3 else {}
        for k, raw in sorted(items.items()):
            if not k.startswith(FSSPEC_PREFIX):
                continue
            protocol, _, option = k[len(FSSPEC_PREFIX) :].partition(".")
            if not protocol or not option:
                raise ConfigurationError(
                    f"{k!r}: fsspec options are keyed fsspec.<protocol>.<option>, e.g. "
                    f"fsspec.s3.requester_pays"
                )
            by_protocol[protocol] = _merge(
                by_protocol.get(protocol, {}), {option: _value(str(raw))}
            )
        return StorageOptions(by_protocol)

    def for_protocol(self, protocol: str) -> dict[str, Any]:
        """The options of ``protocol``, streamstate's defaults included."""
        return _merge(_DEFAULTS.get(protocol, {}), self.by_protocol.get(protocol, {}))

    def install(self) -> None:
        """Make these the options of every new fsspec file system of this process
        (replacing what an earlier :meth:`install` set; the user's own fsspec
        configuration of other protocols stays)."""
        import fsspec.config

        with _LOCK:
            for protocol, before in _BEFORE.items():
                fsspec.config.conf[protocol] = before
            for protocol in set(_DEFAULTS) | set(self.by_protocol):
                before = _BEFORE.setdefault(protocol, dict(fsspec.config.conf.get(protocol, {})))
                fsspec.config.conf[protocol] = _merge(before, self.for_protocol(protocol))
            _STATE["installed"] = self

    @staticmethod
    def current() -> StorageOptions:
        """The options installed last in this process (none installed: empty), e.g. to
        ship them with Spark tasks that read a store (the State Processor API)."""
        installed = _STATE["installed"]
        return installed if isinstance(installed, StorageOptions) else StorageOptions()

    def installed_around(self, task: Any) -> Any:
        """``task`` (a Spark partition function) installing these options first, in the
        executor process that runs it."""
        return partial(_run_installed, self, task)


_LOCK = threading.Lock()
#: protocol -> fsspec's defaults for it before the first :meth:`StorageOptions.install`
#: of this process (the user's own, restored under the next install's options)
_BEFORE: dict[str, dict[str, Any]] = {}
_STATE: dict[str, StorageOptions | None] = {"installed": None}


def ensure_installed() -> None:
    """Streamstate's defaults, when no job installed options in this process yet (a CLI
    command, the state reader): the AWS SDK's environment supplies the rest."""
    if _STATE["installed"] is None:
        StorageOptions().install()


def _run_installed(options: StorageOptions, task: Any, *args: Any) -> Any:
    options.install()
    return task(*args)


def _text(items: Mapping[str, Any], key: str) -> str:
    value = items.get(key)
    return "" if value is None else str(value).strip()


def _value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw
