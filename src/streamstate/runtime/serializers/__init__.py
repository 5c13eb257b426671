"""Type serializers (see :mod:`.base` for the contract, :mod:`.registry` for lookup)."""
