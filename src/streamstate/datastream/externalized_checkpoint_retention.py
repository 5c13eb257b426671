"""``ExternalizedCheckpointRetention``, as ``pyflink.datastream.externalized_checkpoint_retention``.

PyFlink 2.x's name for what happens to retained checkpoints when the job ends. It is the
same enum as :class:`~streamstate.datastream.checkpoint_config.ExternalizedCheckpointCleanup`
(its older name), so either is accepted by
``CheckpointConfig.set_externalized_checkpoint_retention``.
"""

from streamstate.datastream.checkpoint_config import ExternalizedCheckpointCleanup

__all__ = ["ExternalizedCheckpointRetention"]

ExternalizedCheckpointRetention = ExternalizedCheckpointCleanup
