from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import xgboost as xgb

from backend.predictor.artifacts import (
    MAGIC,
    ArtifactError,
    CompiledTrees,
    decode_envelope,
    encode_envelope,
    read_header,
)


@pytest.mark.parametrize("depth", [1, 3, 4, 6])
def test_compiled_trees_match_xgboost(depth: int) -> None:
    rng = np.random.default_rng(depth)
    X = rng.random((3000, 5), dtype=np.float32) * 100
    y = np.sin(X[:, 0] / 10) + X[:, 1] / 50 + (X[:, 2] > 40) + rng.normal(0, 0.1, 3000)
    booster = xgb.train(
        {"max_depth": depth, "eta": 0.3, "nthread": 1, "base_score": 0.7},
        xgb.DMatrix(X, label=y),
        num_boost_round=25,
    )
    compiled = CompiledTrees.from_booster(booster, n_features=5)
    probe = rng.random((500, 5), dtype=np.float32) * 120 - 10
    expected = booster.inplace_predict(probe)
    np.testing.assert_allclose(compiled.margin(probe), expected, rtol=1e-5, atol=1e-5)
    assert compiled.depth == depth


def test_compiled_trees_handle_large_batches_in_chunks() -> None:
    rng = np.random.default_rng(0)
    X = rng.random((10_000, 3), dtype=np.float32)
    booster = xgb.train(
        {"max_depth": 3, "nthread": 1}, xgb.DMatrix(X, label=X[:, 0] * 3), num_boost_round=10
    )
    compiled = CompiledTrees.from_booster(booster, n_features=3)
    np.testing.assert_allclose(compiled.margin(X), booster.inplace_predict(X), atol=1e-5)


def test_envelope_round_trip_and_framing() -> None:
    data = encode_envelope({"kind": "test"}, b"payload-bytes")
    assert data.startswith(MAGIC)
    (size,) = struct.unpack_from(">I", data, len(MAGIC))
    header = json.loads(data[len(MAGIC) + 4 : len(MAGIC) + 4 + size])
    assert header["kind"] == "test" and header["format_version"] == 1
    assert data[len(MAGIC) + 4 + size :] == b"payload-bytes"
    assert decode_envelope(data) == (header, b"payload-bytes")
    assert read_header(data) == header


def test_damaged_envelopes_are_rejected() -> None:
    data = encode_envelope({"kind": "test"}, b"payload-bytes")
    with pytest.raises(ArtifactError, match="magic"):
        decode_envelope(b"\x80\x04" + data)
    with pytest.raises(ArtifactError, match="checksum"):
        decode_envelope(data[:-1] + b"X")
    with pytest.raises(ArtifactError, match="truncated"):
        decode_envelope(data[:-3])
    future = data.replace(b'"format_version":1', b'"format_version":9')
    with pytest.raises(ArtifactError, match="format_version"):
        decode_envelope(future)
