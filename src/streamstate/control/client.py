"""The CLI's side of the REST API: find a job (registry or ``--address``) and call it.

Plain ``urllib`` against the driver's server; errors become
:class:`~streamstate.errors.ControlPlaneError` naming the job, the address and the fix.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from streamstate.control.registry import list_jobs
from streamstate.errors import ControlPlaneError

__all__ = ["JobTarget", "RestClient", "resolve_job"]


class RestClient:
    """JSON calls to one REST server (``address`` like ``http://127.0.0.1:40123``)."""

    def __init__(self, address: str, token: str | None = None, timeout: float = 10.0) -> None:
        self.address = address.rstrip("/")
        if "://" not in self.address:
            self.address = "http://" + self.address
        self.token = token
        self.timeout = timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.address + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            try:
                msg = "; ".join(json.loads(e.read()).get("errors", [])) or e.reason
            except ValueError:
                msg = str(e.reason)
            raise ControlPlaneError(f"{method} {self.address}{path}: {e.code} {msg}") from None
        except (urllib.error.URLError, OSError) as e:
            raise ControlPlaneError(
                f"no streamstate REST server answers at {self.address} ({e}); is the job "
                f"still running? (`streamstate list` shows the running ones)"
            ) from None
        return json.loads(raw) if raw.strip() else {}

    def wait_savepoint(self, job_id: str, request_id: str, timeout: float) -> str:
        """Poll a savepoint/stop trigger until it completes; its location."""
        deadline = time.monotonic() + timeout
        while True:
            doc = self.call("GET", f"/jobs/{job_id}/savepoints/{request_id}")
            if doc.get("status", {}).get("id") == "COMPLETED":
                op = doc.get("operation", {})
                if "location" in op:
                    return str(op["location"])
                cause = op.get("failure-cause", {})
                raise ControlPlaneError(
                    f"the savepoint of job {job_id} failed: {cause.get('class')}: "
                    f"{cause.get('message')}"
                )
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"the savepoint of job {job_id} did not complete within {timeout:.0f} s "
                    f"(it may still complete; the job takes it at its next epoch boundary)"
                )
            time.sleep(0.2)


@dataclass(frozen=True)
class JobTarget:
    job_id: str
    client: RestClient


def resolve_job(job_id: str, address: str | None, token: str | None) -> JobTarget:
    """The job ``job_id`` (a unique prefix is enough) through ``address`` or the registry."""
    records = list_jobs()
    matches = [r for r in records if r.job_id.startswith(job_id)]
    if address is not None:
        known = next((r for r in matches if r.job_id == job_id), None)
        return JobTarget(job_id, RestClient(address, token or (known.token if known else None)))
    if not matches:
        raise ControlPlaneError(
            f"no running job {job_id!r} in the job registry; `streamstate list` shows the "
            f"running jobs, or pass --address URL (printed by the job at start)"
        )
    if len(matches) > 1:
        raise ControlPlaneError(
            f"job id prefix {job_id!r} matches {len(matches)} jobs: "
            f"{', '.join(r.job_id for r in matches)}; give more of the id"
        )
    rec = matches[0]
    return JobTarget(rec.job_id, RestClient(rec.address, token or rec.token))
