"""The Starlette application of :class:`~streamstate.control.server.ControlServer`.

Routes (Flink's REST names where they fit)::

    GET   /[?token=T]                          the dashboard (static/index.html; /static/*): no data,
                                               open; its reads send the token T
    GET   /config                              server: version, refresh interval
    GET   /jobs                                {"jobs": [{"id", "status"}]}
    GET   /jobs/overview                       {"jobs": [overview...]}
    GET   /jobs/<id>                           details: vertices, plan, counters, epochs
    PATCH /jobs/<id>[?mode=cancel]             cancel (token)
    GET   /jobs/<id>/config                    the job's configuration
    GET   /jobs/<id>/checkpoints               counts, latest, history
    GET   /jobs/<id>/checkpoints/details/<n>   one checkpoint, per operator and subtask
    GET   /jobs/<id>/exceptions                failures with the worker traceback
    POST  /jobs/<id>/savepoints                {"target-directory", "cancel-job", "formatType"} (token)
    POST  /jobs/<id>/stop                      {"targetDirectory", "drain"} (token)
    GET   /jobs/<id>/savepoints/<trigger>      {"status": {"id"}, "operation": {...}}
    GET   /jobs/<id>/state/<name>?key=..       queryable state (token): values as of the
                                               last epoch (&as_of=checkpoint; &key_type=)
    GET   /metrics                             Prometheus text format
"""

from __future__ import annotations

import json
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from streamstate.control import views
from streamstate.control.rescale_route import current_requirements, requested_parallelism
from streamstate.control.state_route import query_state
from streamstate.errors import StreamStateError

__all__ = ["STATIC_DIR", "build_app"]

#: the dashboard's files (package data: hand-written JS and inline SVG, no CDN)
STATIC_DIR = Path(__file__).parent / "static"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"errors": [message]}, status_code=status)


class _Collector:
    def __init__(self, server: Any) -> None:
        self.server = server

    def collect(self) -> Any:
        return views.prometheus_metrics(self.server.all_jobs())


def _version() -> str:
    try:
        return metadata.version("streamstate")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_app(server: Any) -> Starlette:
    """The routes above, reading and steering the jobs attached to ``server``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(server))  # type: ignore[arg-type]  # duck-typed collector
    secured_reads = not server.settings.loopback

    def guard(request: Request, handle: Any, mutating: bool) -> Response | None:
        if not (mutating or secured_reads):
            return None
        status = server.check_token(request.headers.get("authorization"), handle)
        if status == 401:
            return _error(
                401,
                "this call needs 'Authorization: Bearer <token>' (the token is "
                "in the job's registry file; the CLI sends it)",
            )
        if status == 403:
            return _error(403, "the bearer token is not this job's token")
        return None

    def job_or_404(request: Request) -> tuple[Any, Response | None]:
        jid = request.path_params["jid"]
        handle = server.job(jid)
        if handle is None:
            return None, _error(404, f"job {jid} is not known to this server")
        denied = guard(request, handle, request.method not in ("GET", "HEAD"))
        return handle, denied

    async def config(request: Request) -> Response:
        if (denied := guard(request, None, False)) is not None:
            return denied
        return JSONResponse(
            {
                "refresh-interval": 1000,
                "streamstate-version": _version(),
                "features": {"web-submit": False, "web-cancel": True},
            }
        )

    async def jobs(request: Request) -> Response:
        if (denied := guard(request, None, False)) is not None:
            return denied
        return JSONResponse(
            {
                "jobs": [
                    {"id": h.job_id, "status": h.executor.status.name} for h in server.all_jobs()
                ]
            }
        )

    async def overview(request: Request) -> Response:
        if (denied := guard(request, None, False)) is not None:
            return denied
        return JSONResponse({"jobs": [views.job_overview(h) for h in server.all_jobs()]})

    async def job(request: Request) -> Response:
        handle, denied = job_or_404(request)
        if denied is not None:
            return denied
        if request.method == "PATCH":
            mode = request.query_params.get("mode", "cancel")
            if mode != "cancel":
                return _error(400, f"mode must be 'cancel', got {mode!r}")
            handle.executor.cancel()
            return JSONResponse({}, status_code=202)
        return JSONResponse(views.job_details(handle))

    async def job_config(request: Request) -> Response:
        handle, denied = job_or_404(request)
        if denied is not None:
            return denied
        return JSONResponse(
            {
                "jid": handle.job_id,
                "name": handle.executor.job_name,
                "execution-config": {"user-config": views.hide_secrets(handle.configuration)},
            }
        )

    async def checkpoints(request: Request) -> Response:
        handle, denied = job_or_404(request)
        return denied or JSONResponse(views.checkpoints(handle))

    async def checkpoint_details(request: Request) -> Response:
        handle, denied = job_or_404(request)
        if denied is not None:
            return denied
        cid = int(request.path_params["cid"])
        doc = views.checkpoint_details(handle, cid)
        if doc is None:
            return _error(404, f"checkpoint {cid} is not in the history of job {handle.job_id}")
        return JSONResponse(doc)

    async def exceptions(request: Request) -> Response:
        handle, denied = job_or_404(request)
        return denied or JSONResponse(views.exceptions(handle))

    async def _body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw.strip():
            return {}
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    async def _trigger(request: Request, stop: bool) -> Response:
        handle, denied = job_or_404(request)
        if denied is not None:
            return denied
        try:
            body = await _body(request)
        except ValueError as e:
            return _error(400, f"bad request body: {e}")
        if stop:
            directory = body.get("targetDirectory")
            kwargs = {"stop": True, "advance_to_end_of_event_time": bool(body.get("drain"))}
        else:
            directory = body.get("target-directory")
            kwargs = {"stop": bool(body.get("cancel-job"))}
        native = str(body.get("formatType", "CANONICAL")).upper() == "NATIVE"
        try:
            future = handle.executor.trigger_savepoint(directory, native=native, **kwargs)
        except StreamStateError as e:
            return _error(400, str(e))
        tid = server.trigger(handle, future)
        return JSONResponse({"request-id": tid}, status_code=202)

    async def savepoints(request: Request) -> Response:
        return await _trigger(request, stop=False)

    async def stop(request: Request) -> Response:
        return await _trigger(request, stop=True)

    async def savepoint_status(request: Request) -> Response:
        handle, denied = job_or_404(request)
        if denied is not None:
            return denied
        future = handle.triggers.get(request.path_params["tid"])
        if future is None:
            return _error(404, f"no savepoint trigger {request.path_params['tid']}")
        if not future.done():
            return JSONResponse({"status": {"id": "IN_PROGRESS"}})
        # marked read only once the answer is sent: a stopped job's process ends as soon
        # as its outcomes were read, and must not cut this answer short
        read = BackgroundTask(handle.outcome_read, request.path_params["tid"])
        err = future.exception()
        if err is None:
            return JSONResponse(
                {"status": {"id": "COMPLETED"}, "operation": {"location": future.result()}},
                background=read,
            )
        return JSONResponse(
            {
                "status": {"id": "COMPLETED"},
                "operation": {
                    "failure-cause": {
                        "class": type(err).__name__,
                        "message": str(err),
                        "stack-trace": "".join(traceback.format_exception(err)),
                    }
                },
            },
            background=read,
        )

    async def resource_requirements(request: Request) -> Response:
        handle, denied = job_or_404(request)
        if denied is not None:
            return denied
        if request.method == "PUT":
            try:
                operators = requested_parallelism(await _body(request))
                handle.executor.rescale(operators=operators)
            except ValueError as e:  # a bad body, a RescaleError
                return _error(400, str(e))
            return JSONResponse({}, status_code=202)
        return JSONResponse(current_requirements(handle.executor))

    async def state(request: Request) -> Response:
        jid = request.path_params["jid"]
        handle = server.job(jid)
        if handle is None:
            return _error(404, f"job {jid} is not known to this server")
        # state values are data: reading them always needs the job's token
        if (denied := guard(request, handle, True)) is not None:
            return denied
        status, doc = await run_in_threadpool(
            query_state, jid, request.path_params["name"], request.query_params
        )
        return JSONResponse(doc, status_code=status)

    async def metrics(request: Request) -> Response:
        if (denied := guard(request, None, False)) is not None:
            return denied
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def dashboard(request: Request) -> Response:
        # the page and /static hold no data: every read it makes carries the token
        return FileResponse(STATIC_DIR / "index.html")

    routes = [
        Route("/", dashboard),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
        Route("/config", config),
        Route("/jobs", jobs),
        Route("/jobs/overview", overview),
        Route("/jobs/{jid}", job, methods=["GET", "PATCH"]),
        Route("/jobs/{jid}/config", job_config),
        Route("/jobs/{jid}/checkpoints", checkpoints),
        Route("/jobs/{jid}/checkpoints/details/{cid:int}", checkpoint_details),
        Route("/jobs/{jid}/exceptions", exceptions),
        Route("/jobs/{jid}/savepoints", savepoints, methods=["POST"]),
        Route("/jobs/{jid}/savepoints/{tid}", savepoint_status),
        Route("/jobs/{jid}/stop", stop, methods=["POST"]),
        Route("/jobs/{jid}/state/{name}", state),
        Route("/jobs/{jid}/resource-requirements", resource_requirements, methods=["GET", "PUT"]),
        Route("/metrics", metrics),
    ]
    return Starlette(routes=routes)
