"""The subtask-host process itself (no Spark): a worker starts it through the machine's
zygote (a fork, not a new interpreter), reaches it again on a new connection, and the
job's end stops it and removes its socket."""

from __future__ import annotations

import os
import uuid

from streamstate.runtime import subtask_host as h


def test_a_host_is_forked_reached_again_and_stopped():
    job = f"unit-{uuid.uuid4().hex}"
    path = h._socket_path(job, 0, 1)
    try:
        conn = h._connection(path, job, 30)
        assert os.path.exists(path)
        h._drop(path)  # a later task of another worker: a new connection, the same host
        again = h._connection(path, job, 30)
        assert again is not conn
        zygotes = [n for n in os.listdir(h.host_dir()) if n.startswith("zygote-")]
        assert any(n.endswith(".sock") for n in zygotes)  # started through the zygote
    finally:
        assert h.stop_hosts(job) == [1]
    assert not os.path.exists(path)
    assert h.stop_hosts(job) == [0]  # idempotent
