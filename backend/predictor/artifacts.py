"""Model artifacts: the safe byte format, and the compiled tree form used on the hot path.

An artifact is ``MAGIC``, a 4-byte big-endian header length, a UTF-8 JSON header, then the payload
(XGBoost's own UBJ or JSON model, or nothing). Nothing is ever pickled, so loading an artifact
cannot execute code.

XGBoost's own ``inplace_predict`` costs about 200 us per call even for a single tree (about 60 us
of it inside the library, which rereads the cgroup CPU quota on every call): for two targets that
alone would eat the hot-path budget.
``CompiledTrees`` flattens a booster into numpy arrays once, at fit or load time, and evaluates
all trees together with a handful of vectorised numpy operations.
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import xgboost as xgb

MAGIC: Final = b"HEADROOM-MODEL\n"
FORMAT_VERSION: Final = 1
_LEN = struct.Struct(">I")

FloatArray = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.intp]


class ArtifactError(ValueError):
    """The bytes are not a Headroom model artifact this version can read."""


def encode_envelope(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """Frame a JSON header and a payload; the header records the payload's size and checksum."""
    full = {
        **header,
        "format_version": FORMAT_VERSION,
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    head = json.dumps(full, separators=(",", ":"), allow_nan=False).encode()
    return MAGIC + _LEN.pack(len(head)) + head + payload


def read_header(data: bytes) -> dict[str, Any]:
    """The artifact's JSON header, without touching the payload (cheap: for listings)."""
    return _split(data)[0]


def decode_envelope(data: bytes) -> tuple[dict[str, Any], bytes]:
    header, payload = _split(data)
    if len(payload) != header.get("payload_bytes"):
        raise ArtifactError("artifact payload is truncated")
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise ArtifactError("artifact payload checksum mismatch")
    return header, payload


def _split(data: bytes) -> tuple[dict[str, Any], bytes]:
    if not data.startswith(MAGIC):
        raise ArtifactError("not a Headroom model artifact (bad magic)")
    start = len(MAGIC) + _LEN.size
    if len(data) < start:
        raise ArtifactError("artifact header is truncated")
    (size,) = _LEN.unpack_from(data, len(MAGIC))
    try:
        header = json.loads(data[start : start + size])
    except ValueError as exc:
        raise ArtifactError(f"artifact header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ArtifactError("artifact header is not a JSON object")
    version = header.get("format_version")
    if version != FORMAT_VERSION:
        raise ArtifactError(f"unsupported artifact format_version {version!r}")
    return header, data[start + size :]


def booster_to_bytes(booster: xgb.Booster, encoding: str = "ubj") -> bytes:
    if encoding not in ("ubj", "json"):
        raise ValueError(f"unknown booster encoding {encoding!r}")
    return bytes(booster.save_raw(encoding))


def booster_from_bytes(raw: bytes, *, nthread: int = 1) -> xgb.Booster:
    booster = xgb.Booster()
    booster.load_model(bytearray(raw))
    booster.set_param({"nthread": nthread})
    return booster


# Depth up to 4 means at most 15 split nodes per tree: the decision bits of a whole tree fit in
# a 2**15 lookup table shared by all trees, which beats walking the trees level by level.
_LUT_MAX_DEPTH: Final = 4
_CHUNK_ROWS: Final = 4096


def _leaf_lut(depth: int) -> IndexArray:
    """Map the packed decision bits of a complete tree (bit i = node i goes right) to its leaf."""
    n_split = 2**depth - 1
    codes = np.arange(2**n_split, dtype=np.intp)
    node = np.zeros_like(codes)
    for _ in range(depth):
        node = 2 * node + 1 + ((codes >> node) & 1)
    leaf: IndexArray = node - n_split
    return leaf


class CompiledTrees:
    """A booster's trees padded to complete binary trees of one depth, as numpy arrays.

    Node ``i`` of a tree has children ``2i+1`` (taken when ``x < threshold``) and ``2i+2``. A
    leaf above the full depth becomes dummy splits (threshold +inf: always left) whose leaves all
    repeat its value. Missing values are not supported: feature matrices never hold NaN.

    Shallow ensembles evaluate every split of every tree at once, pack each tree's decisions into
    an integer with one matrix-vector product and look its leaf up in a shared table; the arrays
    are laid out node-major so that all of this is contiguous. Deeper ones walk level by level.
    """

    def __init__(
        self,
        feature: npt.NDArray[np.intp],
        threshold: FloatArray,
        leaf: FloatArray,
        intercept: float = 0.0,
    ) -> None:
        self.n_trees, n_split = feature.shape
        self.depth = int(np.log2(n_split + 1))
        self.intercept = np.float32(intercept)
        self._feature, self._threshold, self._leaf = feature, threshold, leaf
        self._leaf_flat = np.ascontiguousarray(leaf).reshape(-1)
        self._leaf_start = (np.arange(self.n_trees, dtype=np.intp) * (n_split + 1))[:, None]
        self._lut: IndexArray | None = None
        if self.depth <= _LUT_MAX_DEPTH:
            self._lut = _leaf_lut(self.depth)
            self._node_feature = np.ascontiguousarray(feature.T).reshape(-1)
            self._node_threshold = np.ascontiguousarray(threshold.T).reshape(-1, 1)
            self._bit = np.exp2(np.arange(n_split, dtype=np.float32))
        else:
            self._tree_feature = np.ascontiguousarray(feature).reshape(-1)
            self._tree_threshold = np.ascontiguousarray(threshold).reshape(-1)

    @classmethod
    def from_booster(cls, booster: xgb.Booster, n_features: int) -> CompiledTrees:
        model = json.loads(bytes(booster.save_raw("json")))
        trees = model["learner"]["gradient_booster"]["model"]["trees"]
        depth = max([1, *(_tree_depth(t) for t in trees)])
        n_split = 2**depth - 1
        feature = np.zeros((len(trees), n_split), dtype=np.intp)
        threshold = np.full((len(trees), n_split), np.inf, dtype=np.float32)
        leaf = np.zeros((len(trees), n_split + 1), dtype=np.float32)
        for t, tree in enumerate(trees):
            _fill(tree, 0, 0, 0, depth, feature[t], threshold[t], leaf[t])
        if feature.size and int(feature.max()) >= n_features:
            raise ArtifactError("booster splits on a feature the model does not have")
        return cls(feature, threshold, leaf)._calibrated(booster, n_features)

    def _calibrated(self, booster: xgb.Booster, n_features: int) -> CompiledTrees:
        """Take the intercept (base_score) from XGBoost itself and prove the two agree.

        Reading ``base_score`` from the JSON would tie us to its string format, which changed in
        XGBoost 3; comparing on probe rows also catches any other drift in tree semantics.
        """
        probe = self._probe_rows(n_features)
        expected = booster.inplace_predict(probe, predict_type="margin", validate_features=False)
        expected = np.asarray(expected, dtype=np.float64).reshape(-1)
        ours = self.margin(probe).astype(np.float64)
        intercept = float(np.median(expected - ours))
        tolerance = 1e-4 * (1.0 + float(np.abs(expected).max()))
        if float(np.abs(expected - ours - intercept).max()) > tolerance:
            raise ArtifactError("compiled trees disagree with XGBoost's own prediction")
        return CompiledTrees(self._feature, self._threshold, self._leaf, intercept)

    def _probe_rows(self, n_features: int) -> FloatArray:
        """Rows whose values sit on and around the split thresholds, so both branches are hit."""
        rng = np.random.default_rng(0)
        rows = np.zeros((256, n_features), dtype=np.float32)
        finite = np.isfinite(self._threshold)
        for j in range(n_features):
            cuts = self._threshold[finite & (self._feature == j)]
            if cuts.size:
                picks = rng.choice(cuts, size=rows.shape[0])
                nudge = rng.choice(np.array([-1.0, 0.0, 1.0], dtype=np.float32), rows.shape[0])
                rows[:, j] = picks + nudge * np.maximum(np.abs(picks), 1.0) * 1e-3
        return rows

    def margin(self, X: FloatArray) -> FloatArray:
        """Sum of the trees' outputs plus the intercept: one float32 per row of ``X``."""
        n = X.shape[0]
        if n <= _CHUNK_ROWS:
            return self._margin(X)
        out = np.empty(n, dtype=np.float32)
        for start in range(0, n, _CHUNK_ROWS):
            out[start : start + _CHUNK_ROWS] = self._margin(X[start : start + _CHUNK_ROWS])
        return out

    def _margin(self, X: FloatArray) -> FloatArray:
        n = X.shape[0]
        if self.n_trees == 0:
            return np.full(n, self.intercept, dtype=np.float32)
        if self._lut is not None:
            columns = np.ascontiguousarray(X.T)
            right = columns[self._node_feature] >= self._node_threshold  # (n_split*n_trees, n)
            bits = right.astype(np.float32).reshape(self._bit.shape[0], -1)
            codes = (self._bit @ bits).astype(np.intp)  # exact: integers < 2**15 in float32
            leaf_at = np.take(self._lut, codes).reshape(self.n_trees, n)
        else:
            leaf_at = self._walk(X)
        leaf_at += self._leaf_start
        out: FloatArray = np.take(self._leaf_flat, leaf_at).sum(axis=0, dtype=np.float32)
        out += self.intercept
        return out

    def _walk(self, X: FloatArray) -> IndexArray:
        n, n_split = X.shape[0], 2**self.depth - 1
        flat = np.ascontiguousarray(X).reshape(-1)
        row_start = np.arange(n, dtype=np.intp) * X.shape[1]
        tree_start = (np.arange(self.n_trees, dtype=np.intp) * n_split)[:, None]
        node = np.zeros((self.n_trees, n), dtype=np.intp)
        at = np.empty_like(node)
        for _ in range(self.depth):
            np.add(tree_start, node, out=at)
            column = np.take(self._tree_feature, at)
            column += row_start
            node *= 2
            node += 1
            node += np.take(flat, column) >= np.take(self._tree_threshold, at)
        node -= n_split
        return node


def _tree_depth(tree: dict[str, Any]) -> int:
    left, right = tree["left_children"], tree["right_children"]

    def depth(i: int) -> int:
        return 0 if left[i] == -1 else 1 + max(depth(left[i]), depth(right[i]))

    return depth(0)


def _fill(
    tree: dict[str, Any],
    src: int,
    dst: int,
    level: int,
    depth: int,
    feature: IndexArray,
    threshold: FloatArray,
    leaf: FloatArray,
) -> None:
    """Copy node ``src`` of an XGBoost tree to heap slot ``dst`` of a complete tree."""
    n_split = 2**depth - 1
    if tree["left_children"][src] == -1:
        # Dummy splits below keep threshold +inf (everything goes left), so fill the whole
        # span of leaves under this slot with the one value.
        span = 2 ** (depth - level)
        first = dst
        for _ in range(depth - level):
            first = 2 * first + 1
        leaf[first - n_split : first - n_split + span] = tree["split_conditions"][src]
        return
    feature[dst] = tree["split_indices"][src]
    threshold[dst] = tree["split_conditions"][src]
    for child, slot in (
        (tree["left_children"][src], 2 * dst + 1),
        (tree["right_children"][src], 2 * dst + 2),
    ):
        _fill(tree, child, slot, level + 1, depth, feature, threshold, leaf)
