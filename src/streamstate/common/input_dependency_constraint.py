"""``InputDependencyConstraint``, as ``pyflink.common.input_dependency_constraint``."""

from __future__ import annotations

from enum import Enum

__all__ = ["InputDependencyConstraint"]


class InputDependencyConstraint(Enum):
    """When a consumer of several inputs may be scheduled (deprecated in Flink, where it
    no longer has an effect). Here every stage of an epoch runs in one Spark job after
    all of its inputs, which is ``ALL``."""

    ANY = 0
    ALL = 1
