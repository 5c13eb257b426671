"""Queryable state: consistent point lookups into a running job's keyed state.

``service.py`` holds the snapshots the driver publishes and answers lookups,
``serving.py`` the serving copies (per key group or subtask) they are read from,
``server.py`` the bounded TCP query server and ``wire.py`` its framing (shared with
:mod:`streamstate.queryablestate`, the client).
"""
