"""Spark's console progress bar stays off while a job shows streamstate's own progress.

Sessions streamstate builds start without Spark's bar (``spark.ui.showConsoleProgress:
false``). A user's own session may have one (the ``pyspark`` shell turns it on, or the
user did): its ``[Stage 3:====>  (1 + 1) / 2]`` redraws would interleave with the job's
progress line on the same terminal. Spark reads that key once, when the SparkContext
starts, and its bar has no pause: :func:`suspend_console_progress` finishes and stops the
context's bar when the job starts, and the resume it returns gives the context a new bar
(Spark's own ``ConsoleProgressBar``) when the job ends, so the session is as it was. With
``execution.progress: none`` the job shows nothing, and Spark's bar stays.

The context keeps its bar in a private field (``SparkContext._progressBar``, an
``Option``) that Spark sets only in its constructor: the resume sets it by reflection. On
a Spark without that field the bar is left alone (shown, as before).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from streamstate.runtime.job_status import PROGRESS_KEY

__all__ = ["suspend_console_progress"]

log = logging.getLogger(__name__)

#: the private field of ``org.apache.spark.SparkContext`` that holds its progress bar
_FIELD = "_progressBar"


def _shows_progress(configuration: Any) -> bool:
    mode = None if configuration is None else configuration.get_string(PROGRESS_KEY, None)
    return (mode or "auto").strip().lower() != "none"


def suspend_console_progress(spark: Any, configuration: Any) -> Callable[[], None] | None:
    """Stop the Spark console progress bar of ``spark``'s context while the job shows its
    own progress; returns what brings a bar back (call it when the job ends), or None when
    there was nothing to stop (no bar, the job's progress off, a Connect session)."""
    if not _shows_progress(configuration):
        return None
    try:
        sc = spark.sparkContext
        context = sc._jsc.sc()
        bar = context.progressBar()
        if not bar.isDefined():
            return None
        field = context.getClass().getDeclaredField(_FIELD)
        field.setAccessible(True)
        jvm = sc._jvm
        bar.get().finishAll()  # clears the bar it drew, if any
        bar.get().stop()
        field.set(context, jvm.scala.Option.apply(None))
    except Exception as e:  # noqa: BLE001 - a Spark without the field keeps its bar
        log.debug("Spark's console progress bar left on: %s", e)
        return None

    def resume() -> None:
        try:
            if sc._jsc is None:  # the context stopped meanwhile
                return
            field.set(context, jvm.scala.Some(jvm.org.apache.spark.ui.ConsoleProgressBar(context)))
        except Exception as e:  # noqa: BLE001 - the job ended; its session lost a bar only
            log.debug("Spark's console progress bar not restored: %s", e)

    return resume
