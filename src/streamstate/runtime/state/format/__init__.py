"""The keyed-state formats every backend shares.

``keyed``: the full snapshot (``SSKS``) and delta (``SSKD``) byte formats, versioned.
``serializers``: the serializers recorded with each state and the restore checks.
``namespaces``: the void namespace and the window namespace serializer.

Every backend writes and reads ``keyed`` through the keyed-store contract
(``runtime/state/store.py``), so a backend restores any other's snapshots and deltas;
RocksDB's own files (incremental checkpoints) are its alone.
"""
