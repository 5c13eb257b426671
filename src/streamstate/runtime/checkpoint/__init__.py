"""Checkpoint storage, metadata, handles and the coordinator's lifecycle."""
