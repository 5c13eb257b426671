"""The runtime of the State Processor API (no pyspark: ``streamstate.spark.state_processor``
drives it from Spark tasks).

* ``plan``: on the driver, load a savepoint's (or checkpoint's) ``_metadata`` and describe
  one read as picklable specs: the operator's handles, one key-group range per task, the
  backend to restore into, the key serializer.
* ``reading``: in a task, restore one key-group range into a fresh keyed backend (heap,
  or RocksDB: native handles always open with RocksDB's restore path) and run the user's
  reader function over its keys or windows; read one subtask's operator state.
* ``bootstrap``: in a task, run a bootstrap function over one key-group range's records
  (or one partition's) and write the snapshot into the savepoint directory.
* ``writing``: on the driver, assemble and sign the new savepoint's ``_metadata``
  (``SavepointTarget``), and copy the kept state of an existing savepoint into it.
"""
