"""File formats, mirroring ``pyflink.datastream.formats``."""
