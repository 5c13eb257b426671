"""Co-scheduled tasks: Flink's execution model on one Spark barrier stage.

The ``barrier`` runner (``spark/barrier_runner.py``) runs a whole job as ONE Spark job
whose one stage is ``n`` co-scheduled, long-running tasks (Spark's barrier execution
mode), ``n`` the largest parallelism of the plan. Task ``i`` runs subtask ``i`` of every
stage, as a Flink slot runs a pipeline of subtasks, so its operators and state live in its
Python worker for the job's life. The driver's :class:`~.coordinator.TaskCoordinator` is
the JobManager: it hands every task each epoch's specs and gathers their acks; the epoch
itself is the same worker step as on the other runners (``task.run_stage_partition``).
Records cross between tasks over channels the tasks open themselves
(:mod:`.channels`), never through Spark's shuffle; a record for the task's own subtask
stays in its process. Every connection is authenticated both ways with a secret the
driver made for that launch (``runtime/mutual_auth.py``) before anything is unpickled.

* ``links.py``: the authenticated, framed connections and the wire version;
* ``coordinator.py``: the driver's end (launch handshake, epochs, acks, stop);
* ``channels.py``: a task's channels to and from its peers;
* ``task_loop.py``: what a task runs from its start to the job's end.
"""
