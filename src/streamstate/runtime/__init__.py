"""Runtime internals. Nothing under ``streamstate.runtime`` imports pyspark."""
