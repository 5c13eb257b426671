"""Shared test helpers: keyed backends (``backends``), job environments (``envs``)."""
