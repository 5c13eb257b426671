"""The control plane: the REST API a job's driver serves, the job registry, the CLI's client.

``execute()`` attaches every job to the driver process's :class:`ControlServer`
(Starlette on uvicorn, in a daemon thread; ``rest.enabled``, ``rest.port``,
``rest.bind-address``, ``rest.token``) and writes a registry file
(:mod:`streamstate.control.registry`) so that ``streamstate list|info|cancel|savepoint|stop``
in another shell finds it. What the API shows is read from the job's own
:class:`~streamstate.runtime.job_metrics.JobMetrics`,
:class:`~streamstate.runtime.checkpoint.stats.CheckpointStatsTracker` and lifecycle.
"""

from streamstate.control.registry import JobRecord, list_jobs, registry_dir
from streamstate.control.server import ControlServer, JobHandle, attach_job

__all__ = ["ControlServer", "JobHandle", "JobRecord", "attach_job", "list_jobs", "registry_dir"]
