"""The DataFrame runner's large stage specs: packed for the file artifact, unpacked in
the worker, byte for byte."""

from __future__ import annotations

import os
import pickle

import pytest

from streamstate.spark.dataframe_runner import _pack_spec, _unpack_spec


@pytest.mark.parametrize(
    "blob",
    [b"", b"x", os.urandom(100_000), pickle.dumps([(f"k{i % 100}", 1) for i in range(50_000)])],
    ids=["empty", "one byte", "incompressible", "records"],
)
def test_a_packed_spec_unpacks_to_the_same_bytes(blob: bytes) -> None:
    assert _unpack_spec(_pack_spec(blob)) == blob


def test_records_pack_smaller() -> None:
    blob = pickle.dumps([(f"k{i % 10_000}", 1) for i in range(200_000)], protocol=5)
    assert len(_pack_spec(blob)) < len(blob) // 4
