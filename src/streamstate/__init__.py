"""streamstate: Apache Flink's state and fault-tolerance model in Python, run on Apache Spark.

Public API lives in the modules that mirror PyFlink: :mod:`streamstate.common`,
:mod:`streamstate.datastream` (and its ``functions``, ``state``, ``state_backend``,
``checkpoint_config``, ``checkpoint_storage`` submodules).
"""

__version__ = "0.1.0"

from streamstate.common._unsupported import install_module_finder as _install_module_finder

# `import streamstate.table` (PyFlink's Table API) and the other PyFlink modules with no
# counterpart here raise UnsupportedFeatureError naming what to use instead
_install_module_finder()
