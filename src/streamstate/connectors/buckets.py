"""FileSink bucket assigners (Flink's ``BucketAssigner``): which sub-directory of the base
path a record goes to.

``DateTimeBucketAssigner(format_str, timezone_id)`` names the bucket after the processing
time (the epoch's driver clock, see docs/architecture.md) formatted with a Java
``DateTimeFormatter`` pattern (default ``yyyy-MM-dd--HH``: one bucket per hour), as
Flink's default. ``BasePathBucketAssigner`` writes every record into the base path. A
subclass of :class:`BucketAssigner` may implement ``get_bucket_id(element, context)``
(Flink's Java interface) to bucket by a property of the record.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

from streamstate.errors import ConfigurationError

__all__ = [
    "BasePathBucketAssigner",
    "BucketAssigner",
    "BucketAssignerContext",
    "DateTimeBucketAssigner",
    "java_pattern_to_strftime",
]


class BucketAssignerContext:
    """What ``get_bucket_id`` may look at besides the record (Flink's
    ``BucketAssigner.Context``)."""

    __slots__ = ("_now", "_timestamp", "_watermark")

    def __init__(self, now_ms: int, watermark: int, timestamp: int | None = None) -> None:
        self._now = now_ms
        self._watermark = watermark
        self._timestamp = timestamp

    def current_processing_time(self) -> int:
        return self._now

    def current_watermark(self) -> int:
        return self._watermark

    def timestamp(self) -> int | None:
        return self._timestamp


class BucketAssigner:
    """Decides the bucket (a relative directory, ``""`` = the base path) of each record."""

    #: False when the bucket depends only on the context's processing time (constant within
    #: an epoch): the sink then asks once per batch instead of once per record
    per_record = True

    def get_bucket_id(self, element: Any, context: BucketAssignerContext) -> str:
        raise NotImplementedError(
            f"{type(self).__name__} must implement get_bucket_id(element, context) -> str"
        )

    @staticmethod
    def base_path_bucket_assigner() -> BasePathBucketAssigner:
        """Every record into the base path, no bucketing."""
        return BasePathBucketAssigner()

    @staticmethod
    def date_time_bucket_assigner(
        format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None
    ) -> DateTimeBucketAssigner:
        """Buckets named after the processing time formatted with ``format_str`` (a Java
        ``DateTimeFormatter`` pattern) in ``timezone_id`` (``"UTC"``, ``"Europe/Paris"``,
        ``"GMT-08:00"``; None: the machine's time zone)."""
        return DateTimeBucketAssigner(format_str, timezone_id)


class BasePathBucketAssigner(BucketAssigner):
    per_record = False

    def get_bucket_id(self, element: Any, context: BucketAssignerContext) -> str:
        return ""


# Java DateTimeFormatter letters -> strftime, by run length (the common subset)
_JAVA = {
    ("y", 4): "%Y", ("y", 2): "%y", ("u", 4): "%Y", ("u", 2): "%y",
    ("M", 2): "%m", ("M", 3): "%b", ("M", 4): "%B", ("d", 2): "%d", ("D", 3): "%j",
    ("H", 2): "%H", ("h", 2): "%I", ("m", 2): "%M", ("s", 2): "%S", ("a", 1): "%p",
    ("E", 3): "%a", ("E", 4): "%A", ("Z", 1): "%z", ("z", 1): "%Z",
}  # fmt: skip
_TOKEN = re.compile(r"'([^']*)'|([A-Za-z])\2*|[^A-Za-z']+")


def java_pattern_to_strftime(pattern: str) -> str:
    """``yyyy-MM-dd--HH`` -> ``%Y-%m-%d--%H`` (quoted text kept literally)."""
    out = []
    for m in _TOKEN.finditer(pattern):
        text = m.group(0)
        if m.group(1) is not None:
            out.append(m.group(1).replace("%", "%%") if m.group(1) else "'")
        elif m.group(2) is not None:
            code = _JAVA.get((m.group(2), len(text)))
            if code is None:
                raise ConfigurationError(
                    f"DateTimeBucketAssigner format {pattern!r}: {text!r} is not supported; use "
                    f"yyyy, yy, MM, MMM, dd, DDD, HH, hh, mm, ss, a, EEE, Z, z or quoted text"
                )
            out.append(code)
        else:
            out.append(text.replace("%", "%%"))
    return "".join(out)


def _zone(timezone_id: str | None) -> tzinfo | None:
    if timezone_id is None:
        return None
    m = re.fullmatch(r"(?:GMT|UTC)?([+-])(\d{1,2})(?::?(\d{2}))?", timezone_id)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        delta = timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0))
        return timezone(sign * delta, timezone_id)
    if timezone_id in ("UTC", "GMT", "Z"):
        return UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(timezone_id)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(
            f"DateTimeBucketAssigner: unknown time zone {timezone_id!r}; use an IANA name "
            f"('Europe/Paris'), 'UTC' or an offset ('GMT-08:00')"
        ) from None


class DateTimeBucketAssigner(BucketAssigner):
    """Buckets by processing time: ``<base>/<formatted time>/`` (Flink's default assigner)."""

    per_record = False

    def __init__(self, format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None) -> None:
        if not isinstance(format_str, str) or not format_str:
            raise ConfigurationError("DateTimeBucketAssigner needs a non-empty format string")
        self.format_str = format_str
        self.timezone_id = timezone_id
        self._strftime = java_pattern_to_strftime(format_str)
        self._tz = _zone(timezone_id)

    def get_bucket_id(self, element: Any, context: BucketAssignerContext) -> str:
        now = context.current_processing_time()
        if self._tz is None:
            t = datetime.fromtimestamp(now / 1000).astimezone()
        else:
            t = datetime.fromtimestamp(now / 1000, self._tz)
        return t.strftime(self._strftime)
