"""The Spark epoch runners by name, and which one a session gets (``execution.runner``).

* ``rdd``: the classic runner (``runner.py``): RDDs, ``partitionBy``, preferred
  locations; needs a SparkContext, so a classic (JVM-backed) session;
* ``dataframe``: the DataFrame runner (``dataframe_runner.py``): ``mapInArrow`` and
  ``repartition`` only; runs on a Spark Connect session and on a classic one;
* ``barrier``: one Spark barrier stage of co-scheduled tasks for the whole job
  (``barrier_runner.py``, Flink's execution model), on the session given (classic or
  Spark Connect) or a classic one;
* ``spark`` (the default): the session decides. A Spark Connect session gets
  ``dataframe``; a classic one :data:`CLASSIC_DEFAULT` (the faster of the two there,
  measured in docs/benchmarks.md). Without a session given, the job runs on the first of:
  ``spark.remote`` in the job's configuration or ``SPARK_REMOTE`` in the environment (a
  Spark Connect server), the warm local session of ``streamstate local start``
  (``local_server.py``), a new or active classic session (``session.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from streamstate.errors import ConfigurationError
from streamstate.runtime.epoch_runner import EpochRunner
from streamstate.spark.barrier_runner import BarrierEpochRunner
from streamstate.spark.dataframe_runner import DataFrameEpochRunner
from streamstate.spark.runner import SparkEpochRunner
from streamstate.spark.session import is_connect_session

__all__ = [
    "AUTO",
    "CLASSIC_DEFAULT",
    "SPARK_RUNNERS",
    "connect_session_for",
    "make_spark_runner",
    "remote_url",
]

AUTO = "spark"
#: the runner a classic session gets under ``execution.runner: spark``
CLASSIC_DEFAULT = "rdd"


def _rdd(spark: Any, configuration: Any) -> EpochRunner:
    if spark is not None and is_connect_session(spark):
        raise ConfigurationError(
            "execution.runner: rdd needs a SparkContext, and a Spark Connect session has "
            "none: use execution.runner: dataframe (or spark, which picks it for Connect)"
        )
    return SparkEpochRunner(spark, configuration)


#: name -> factory(session or None, configuration)
SPARK_RUNNERS: dict[str, Callable[[Any, Any], EpochRunner]] = {
    "rdd": _rdd,
    "dataframe": DataFrameEpochRunner,
    "barrier": BarrierEpochRunner,
}


def remote_url(configuration: Any) -> str | None:
    """The Spark Connect URL a job without a session is to use, or None (classic): the
    ``spark.remote`` key, else ``SPARK_REMOTE``, else the running warm local session."""
    conf = configuration.to_dict() if configuration is not None else {}
    url = conf.get("spark.remote") or os.environ.get("SPARK_REMOTE")
    if url:
        return str(url)
    if conf.get("spark.master") or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None  # a master was asked for (or spark-submit launched us): classic Spark
    from streamstate.spark.local_server import running_server

    server = running_server()
    return None if server is None else server.url


def connect_session_for(configuration: Any) -> Any:
    """The session of a job given none: a Connect session when :func:`remote_url` names
    one (announced on stderr), else None (the runner makes a classic one at start). None
    too when the job's ``execution.runner`` (``rdd``, ``local``) does not run on Connect."""
    conf = configuration.to_dict() if configuration is not None else {}
    if str(conf.get("execution.runner", AUTO)).strip().lower() not in (AUTO, "dataframe"):
        return None
    url = remote_url(configuration)
    if url is None:
        return None
    from streamstate.spark.session import connect_session

    session = connect_session(url, configuration)
    print(f"streamstate: running on the Spark Connect session at {url}", file=sys.stderr)
    return session


def make_spark_runner(name: str, spark: Any, configuration: Any) -> EpochRunner:
    """The runner called ``name`` (``spark``, ``rdd`` or ``dataframe``) on ``spark``."""
    if name not in SPARK_RUNNERS and name != AUTO:
        raise ConfigurationError(
            f"execution.runner must be one of spark, {', '.join(SPARK_RUNNERS)}, local; "
            f"got {name!r}"
        )
    if spark is None and name not in ("rdd", "barrier"):
        spark = connect_session_for(configuration)
        if spark is not None:  # made for this job: the job stops it when it ends
            return DataFrameEpochRunner(spark, configuration, owns_session=True)
    if name == AUTO:
        name = "dataframe" if spark is not None and is_connect_session(spark) else CLASSIC_DEFAULT
    return SPARK_RUNNERS[name](spark, configuration)
