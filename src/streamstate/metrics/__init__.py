"""User metrics, as ``pyflink.metrics`` (see :mod:`streamstate.api.metrics`)."""

from typing import TYPE_CHECKING

from streamstate.api.metrics import Counter, Distribution, Meter, Metric, MetricGroup
from streamstate.common._unsupported import unsupported_attribute

__all__ = ["Counter", "Distribution", "Meter", "Metric", "MetricGroup"]

if not TYPE_CHECKING:  # a typo stays a type error; at run time PyFlink names get typed errors
    __getattr__ = unsupported_attribute(__name__)
