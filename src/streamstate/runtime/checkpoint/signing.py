"""The key that signs ``_metadata``: a checkpoint is trusted only if it verifies.

Restoring a checkpoint can unpickle values (state declared without a type information is
stored with pickle, as PyFlink does), and unpickling data from an untrusted source can run
code. So ``_metadata``, which lists every state file with its size, CRC32 and SHA-256, is
signed with HMAC-SHA256 under a key only its writer has, and the signature is verified
before anything of the checkpoint is read: a checkpoint changed by someone without the
key (or a state file swapped for another) is refused.

The key is ``STREAMSTATE_CHECKPOINT_KEY`` (any string) when set, else the file
``$STREAMSTATE_HOME/checkpoint.key`` (default ``~/.config/streamstate/checkpoint.key``),
created with 32 random bytes and mode 0600 on first use. To restore checkpoints on
another machine or as another user (a cluster's driver, a moved savepoint), give it the
same key.

A ``_metadata`` without a signature (format 1, plain JSON, or a format 2 header without
``hmac-sha256``) proves nothing about its origin, so it is refused unless the reader opts
in by name (:func:`unsigned_allowed`): ``execution.state-recovery.allow-unsigned-checkpoints``
for a job, ``--allow-unsigned-checkpoints`` on the command line, or the environment
variable ``STREAMSTATE_ALLOW_UNSIGNED_CHECKPOINTS=true`` for any reader (the State
Processor API). Opting in trusts that checkpoint as if this deployment had written it:
its pickled state is loaded.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterator

__all__ = [
    "ALLOW_UNSIGNED_ENV",
    "ALLOW_UNSIGNED_KEY",
    "KEY_ENV",
    "allowing_unsigned",
    "key_path",
    "sign",
    "signing_key",
    "unsigned_allowed",
    "verify",
]

KEY_ENV = "STREAMSTATE_CHECKPOINT_KEY"
#: the named opt-ins for unsigned ``_metadata`` (see the module docstring)
ALLOW_UNSIGNED_ENV = "STREAMSTATE_ALLOW_UNSIGNED_CHECKPOINTS"
ALLOW_UNSIGNED_KEY = "execution.state-recovery.allow-unsigned-checkpoints"

_allow_unsigned: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "allow_unsigned", default=False
)


def unsigned_allowed() -> bool:
    """Whether this reader opted in to unsigned ``_metadata`` (a job's or command's option
    in effect, or ``STREAMSTATE_ALLOW_UNSIGNED_CHECKPOINTS=true``)."""
    if _allow_unsigned.get():
        return True
    return os.environ.get(ALLOW_UNSIGNED_ENV, "").strip().lower() in ("1", "true", "yes")


@contextlib.contextmanager
def allowing_unsigned(allowed: bool = True) -> Iterator[None]:
    """Read unsigned ``_metadata`` within this block when ``allowed`` (a named option)."""
    token = _allow_unsigned.set(allowed or _allow_unsigned.get())
    try:
        yield
    finally:
        _allow_unsigned.reset(token)


_cached: dict[str, bytes] = {}


def key_path() -> str:
    home = os.environ.get("STREAMSTATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".config", "streamstate"
    )
    return os.path.join(home, "checkpoint.key")


def signing_key() -> bytes:
    """This process's checkpoint key (created on first use; see the module docstring)."""
    env = os.environ.get(KEY_ENV)
    if env:
        return env.encode()
    path = key_path()
    if path in _cached:
        return _cached[path]
    try:
        with open(path, "rb") as f:
            key = f.read()
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        key = secrets.token_bytes(32)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:  # another process created it first: use theirs
            with open(path, "rb") as f:
                key = f.read()
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(key)
    _cached[path] = key
    return key


def sign(data: bytes) -> str:
    return hmac.new(signing_key(), data, hashlib.sha256).hexdigest()


def verify(data: bytes, signature: str) -> bool:
    return hmac.compare_digest(sign(data), signature)
