"""The keyed-state formats every backend shares.

``keyed``: the full snapshot (``SSKS``) and delta (``SSKD``) byte formats, versioned.
``serializers``: the serializers recorded with each state and the restore checks.
``namespaces``: the void namespace and the window namespace serializer.

The heap backend writes and reads these formats natively; the RocksDB backend uses
them for its full snapshots and per-epoch deltas, so the two backends restore each
other's checkpoints. ``runtime/state/base.py`` is only the backend contract.
"""
