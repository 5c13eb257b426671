"""The worker side of an epoch, in named pieces (``runtime/task.py`` runs them in order).

* :mod:`~streamstate.runtime.worker.host`: :class:`WorkerHost`, the one object that holds
  what a worker process keeps between epochs (stage specs, subtask instances);
* :mod:`~streamstate.runtime.worker.instance`: a subtask's operators and state, built from
  the stage's typed spec and the lineage the driver sent;
* :mod:`~streamstate.runtime.worker.chain`: the operator chain of one epoch, its links
  built from a registry keyed by the node's kind;
* :mod:`~streamstate.runtime.worker.inputs`: how a stage's records come in, a registry
  keyed by the stage's kind (source, SourceFunction, shuffled input);
* :mod:`~streamstate.runtime.worker.event_time`: processing time and watermarks at the
  end of the epoch;
* :mod:`~streamstate.runtime.worker.commit`: the epoch's state versions and savepoint;
* :mod:`~streamstate.runtime.worker.ack`: the ack for the driver and the emitted records.
"""
