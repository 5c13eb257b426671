"""Source and sink implementations (no pyspark). Public wrappers live in
:mod:`streamstate.datastream.connectors`."""
