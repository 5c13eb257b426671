"""S3-compatible object stores (through ``s3fs``): no rename, whole objects at once.

* :meth:`S3Store.write_atomic` is one PUT of the final key (s3fs splits a body above
  100 MiB into a multipart upload, which is just as atomic: the object appears when the
  upload completes). Nothing is copied, nothing temporary is left to clean up.
* :meth:`S3Store.write_once` is a conditional PUT (``If-None-Match: *``): the store
  refuses it when the key exists, also when two writers race. Whether a store honours the
  condition is probed once per bucket (a store that ignores it would overwrite); where it
  does not, write-once falls back to a check before the PUT, with a warning
  (docs/limitations.md).
* :class:`MultipartUploads` (Flink's S3 recoverable writer): a file sink uploads a part
  file's bytes as the parts of a multipart upload before the checkpoint, and the driver
  completes the upload when the checkpoint completed; until then the object does not
  exist for any reader, and an aborted upload leaves nothing.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any, ClassVar, Protocol, runtime_checkable

from streamstate.errors import StoreAccessError
from streamstate.runtime.stores.base import Store, StoreKind

__all__ = ["MIN_PART_SIZE", "MultipartUploads", "S3Store", "Upload"]

log = logging.getLogger(__name__)

#: S3's smallest part of a multipart upload, except the last one
MIN_PART_SIZE = 5 * 1024 * 1024
#: the codes an S3 server answers a failed condition with (SeaweedFS omits the
#: ``Condition`` field AWS sets, so s3fs does not turn it into FileExistsError)
_CONDITION_FAILED = {"PreconditionFailed", "ConditionalRequestConflict"}
_NO_SUCH_UPLOAD = "NoSuchUpload"


#: ``(key path "bucket/key", upload id)``
Upload = tuple[str, str]


@runtime_checkable
class MultipartUploads(Protocol):
    """A store whose objects can be uploaded in parts and made visible later, at once."""

    def start_upload(self, fs: Any, path: str) -> str:
        """A new multipart upload to ``path``; its upload id."""
        ...

    def upload_part(self, fs: Any, path: str, upload_id: str, number: int, data: bytes) -> str:
        """Upload part ``number`` (from 1; every part but the last >= :data:`MIN_PART_SIZE`);
        its ETag."""
        ...

    def complete_upload(
        self, fs: Any, path: str, upload_id: str, etags: list[str], size: int
    ) -> None:
        """Make ``path`` the parts' concatenation, visible at once. Idempotent: an upload
        completed before (the store no longer knows it) whose object has ``size`` bytes is
        done; one that was aborted raises FileNotFoundError."""
        ...

    def abort_upload(self, fs: Any, path: str, upload_id: str) -> None:
        """Discard an upload and its parts (an unknown upload is ignored)."""
        ...

    def list_uploads(self, fs: Any, prefix: str) -> list[Upload]:
        """The uploads under ``prefix`` ("bucket/key prefix") neither completed nor aborted."""
        ...


def _error_code(error: BaseException) -> str | None:
    """The S3 error code behind an s3fs error (it keeps the botocore error as cause)."""
    for e in (error, error.__cause__):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            return str(code) if code is not None else None
    return None


class S3Store(Store):
    """S3 and S3-compatible servers (AWS, SeaweedFS, MinIO, ...) through s3fs."""

    kind = StoreKind.OBJECT_STORE
    protocols: ClassVar[tuple[str, ...]] = ("s3", "s3a")

    def __init__(self) -> None:
        #: (endpoint, bucket) -> whether the server honours If-None-Match
        self._conditional: dict[tuple[str, str], bool] = {}
        self._probe_lock = threading.Lock()

    def write_atomic(self, fs: Any, path: str, data: bytes) -> None:
        fs.pipe_file(path, bytes(data))

    def write_once(self, fs: Any, path: str, data: bytes) -> bool:
        if not self.honours_conditional_put(fs, path):
            if fs.exists(path):
                return False
            fs.pipe_file(path, bytes(data))
            return True
        return self._put_if_absent(fs, path, data)

    def _put_if_absent(self, fs: Any, path: str, data: bytes) -> bool:
        try:
            fs.pipe_file(path, bytes(data), mode="create")
        except FileExistsError:
            return False
        except OSError as e:
            if _error_code(e) in _CONDITION_FAILED:
                return False
            raise
        return True

    def honours_conditional_put(self, fs: Any, path: str) -> bool:
        """Whether the server refuses a conditional PUT to an existing key (probed once per
        endpoint and bucket with a hidden object next to ``path``, then deleted)."""
        bucket = path.split("/", 1)[0]
        key = (_endpoint(fs), bucket)
        with self._probe_lock:
            known = self._conditional.get(key)
            if known is not None:
                return known
            probe = f"{path.rpartition('/')[0]}/.conditional-put-probe-{uuid.uuid4().hex}"
            try:
                first = self._put_if_absent(fs, probe, b"1")
                second = self._put_if_absent(fs, probe, b"2")
                honoured = first and not second
            except OSError as e:
                if _error_code(e) not in ("NotImplemented", "InvalidArgument"):
                    raise
                honoured = False
            finally:
                try:
                    fs.rm_file(probe)
                except FileNotFoundError:
                    pass
            if not honoured:
                log.warning(
                    "the S3 server %s does not honour conditional PUTs (If-None-Match) in "
                    "bucket %s: _metadata and the job lock are written after a check instead, "
                    "which two drivers of one job directory could race (docs/limitations.md)",
                    key[0] or "(AWS)",
                    bucket,
                )
            self._conditional[key] = honoured
            return honoured

    # -- multipart uploads (MultipartUploads) --------------------------------------------------

    def start_upload(self, fs: Any, path: str) -> str:
        bucket, key = _split(path)
        out = fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)
        return str(out["UploadId"])

    def upload_part(self, fs: Any, path: str, upload_id: str, number: int, data: bytes) -> str:
        bucket, key = _split(path)
        out = fs.call_s3(
            "upload_part",
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            Body=bytes(data),
        )
        return str(out["ETag"])

    def complete_upload(
        self, fs: Any, path: str, upload_id: str, etags: list[str], size: int
    ) -> None:
        bucket, key = _split(path)
        parts = [{"PartNumber": i + 1, "ETag": etag} for i, etag in enumerate(etags)]
        try:
            fs.call_s3(
                "complete_multipart_upload",
                Bucket=bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except (FileNotFoundError, OSError) as e:
            if _error_code(e) != _NO_SUCH_UPLOAD:
                raise
            # completed before (a commit repeated after a driver restart), or aborted
            info = _info(fs, path)
            if info is None or int(info.get("size", -1)) != size:
                raise FileNotFoundError(
                    f"multipart upload {upload_id} of s3://{path} is gone and the object is "
                    f"{'missing' if info is None else 'of another size'}: it was aborted"
                ) from e
        fs.invalidate_cache(path)

    def abort_upload(self, fs: Any, path: str, upload_id: str) -> None:
        bucket, key = _split(path)
        try:
            fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)
        except (FileNotFoundError, OSError) as e:
            if _error_code(e) != _NO_SUCH_UPLOAD and not isinstance(e, FileNotFoundError):
                raise

    def list_uploads(self, fs: Any, prefix: str) -> list[Upload]:
        bucket, key_prefix = _split(prefix)
        out: list[Upload] = []
        marker: dict[str, str] = {}
        while True:
            page = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=key_prefix, **marker)
            out.extend(
                (f"{bucket}/{u['Key']}", str(u["UploadId"])) for u in page.get("Uploads") or []
            )
            if not page.get("IsTruncated"):
                return out
            marker = {
                "KeyMarker": page.get("NextKeyMarker", ""),
                "UploadIdMarker": page.get("NextUploadIdMarker", ""),
            }

    # -- errors ----------------------------------------------------------------------------

    def explain(self, url: str, error: BaseException) -> BaseException | None:
        endpoint = _error_endpoint(error)
        name = type(error).__name__
        if name == "NoCredentialsError" or "Unable to locate credentials" in str(error):
            return StoreAccessError(
                f"no S3 credentials to access {url}: set s3.access-key and s3.secret-key (or "
                f"the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY environment variables, or an "
                f"instance role)"
            )
        if isinstance(error, PermissionError):
            return StoreAccessError(
                f"the S3 server refused access to {url} ({error}): check s3.access-key and "
                f"s3.secret-key (or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) and the "
                f"bucket's policy"
            )
        if name in ("EndpointConnectionError", "ConnectTimeoutError") or isinstance(
            error, ConnectionError
        ):
            return StoreAccessError(
                f"cannot reach the S3 endpoint {endpoint or '(default AWS)'} for {url} "
                f"({error}): check s3.endpoint (and s3.path.style.access for a server that "
                f"serves buckets as paths)"
            )
        if _error_code(error) == "NoSuchBucket":
            return StoreAccessError(
                f"the bucket of {url} does not exist: create it (or check s3.endpoint)"
            )
        return None


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key


def _endpoint(fs: Any) -> str:
    kwargs = getattr(fs, "client_kwargs", None) or {}
    return str(kwargs.get("endpoint_url") or getattr(fs, "endpoint_url", "") or "")


def _error_endpoint(error: BaseException) -> str | None:
    for e in (error, error.__cause__):
        endpoint = getattr(e, "kwargs", {}).get("endpoint_url") if e is not None else None
        if endpoint:
            return str(endpoint)
    return None


def _info(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        fs.invalidate_cache(path)
        return dict(fs.info(path))
    except FileNotFoundError:
        return None
