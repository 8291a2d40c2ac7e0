"""The compiled front of ``learn_many`` (``kernels.ingest.ingest_batch``) and the four-lane hashing.

- keys bit-identical to ``record_key`` for random and adversarial ids: every length around the
  block and lane boundaries, every Unicode plane, lone surrogates, ids of exactly 128 and 1024 bytes;
- a batch the fast path does not pass untouched (NUL in an id, empty or too long id, non-str id,
  a row at or over the norm bound, a bad label, mismatched lengths) goes down the general path,
  so ``learn_many`` raises, clips and learns exactly as before;
- labels as ``check_labels`` gives them, rows the very arrays ``check_many`` returns.
"""

import numpy as np
import pytest

from worker.compiled import blake2b, jit
from worker.olu import MAX_ID_BYTES, record_key, record_keys
from worker.olu.algorithms.passive import PassiveOLU
from worker.olu.arith import row_sqnorms
from worker.olu.core.domain import FeatureBound
from worker.olu.core.kernels import ingest, ogd
from worker.olu.core.losses import Logistic, Ridge
from worker.olu.exceptions import InvalidExample, InvalidRecordId


@pytest.fixture(autouse=True)
def kernel_enabled(monkeypatch):
    monkeypatch.setattr(jit, "FORCE_REFERENCE", False)


def random_ids(rng, count):
    """Ids of random code points (surrogates included) and random lengths, no NUL."""
    out = []
    for _ in range(count):
        n = int(rng.integers(1, 60))
        top = [0x80, 0x800, 0x10000, 0x110000][int(rng.integers(0, 4))]
        out.append("".join(chr(int(c)) for c in rng.integers(1, top, size=n)))
    return [r for r in out if len(r.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES]


def adversarial_ids():
    ids = ["x" * n for n in (1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1023, 1024)]
    ids += ["é" * 64, "é" * 63 + "x", "😀" * 32, "😀" * 31 + "abcd", "😀" * 256, "日" * 341]
    ids += ["\ud800", "\udfff", "\udc00\ud800", "a\ud83d\ude00b", "\U0010ffff", "\x7f\x80", "\x01", " "]
    ids += ["r-1", "r-1 ", " r-1", "R-1", "r\u20131"]  # near-duplicates
    return ids


def expected_keys(ids):
    return np.array([record_key(r) for r in ids], np.uint64)


def fast(ids, X=None, y=None, loss=None, features=None, dim=2):
    n = len(ids)
    X = np.full((n, dim), 0.1) if X is None else X
    y = np.ones(n) if y is None else y
    return ingest.ingest_batch(loss or Logistic(0.01), features or FeatureBound(dim, 1.0), ids, X, y)


@pytest.mark.parametrize("seed", range(4))
def test_keys_bit_identical_to_record_key(seed):
    rng = np.random.default_rng(seed)
    ids = random_ids(rng, 700) + adversarial_ids()
    rng.shuffle(ids)  # long and short ids interleaved: lanes filled, flushed and bypassed in every order
    for size in (1, 2, 3, 4, 5, 8, 9, len(ids)):  # partial last lane groups
        part = ids[:size]
        batch = fast(part)
        assert batch is not None
        assert np.array_equal(batch[0], expected_keys(part))
        assert np.array_equal(record_keys(part), expected_keys(part))


def test_spans_hash_only_the_selected():
    ids = adversarial_ids() + [f"r-{i}" for i in range(40)]
    raw = [r.encode("utf-8", "surrogatepass") for r in ids]
    gap = b"{}"  # the spans need not touch: the stream decoder's point into whole messages
    buf = gap.join(raw)
    starts = np.cumsum([0] + [len(r) + len(gap) for r in raw[:-1]])
    spans = np.stack([starts, starts + [len(r) for r in raw]], axis=1).astype(np.int64)
    selected = np.arange(len(ids)) % 3 != 1
    out = np.zeros(len(ids), np.uint64)
    blake2b.blake2b64_spans(np.frombuffer(buf, np.uint8), spans, selected, out)
    assert np.array_equal(out[selected], expected_keys(ids)[selected])
    assert not out[~selected].any()


@pytest.mark.parametrize("ids", [
    ["r-1", "a\x00b"],          # a NUL inside an id: the separator would split it
    ["\x00"],
    ["r-1", ""],                # empty
    ["x" * (MAX_ID_BYTES + 1)],  # too long
    ["é" * 513],
    ["r-1", 5],                 # not a string
    ["r-1", b"r-2"],
])
def test_ids_the_fast_path_leaves_to_the_general_one(ids):
    assert fast(ids) is None


def test_rows_and_labels_the_fast_path_leaves_to_the_general_one():
    X = np.array([[0.6, 0.8 - 1e-9], [0.1, 0.2]])
    assert fast(["a", "b"], X) is not None
    for row in ([0.6, 0.8], [0.6, 0.8 + 1e-12]):  # at the bound, or a rounding over it: clipped as check_many does
        at_bound = np.array([row, [0.1, 0.2]])
        assert fast(["a", "b"], at_bound)[1].tobytes() == FeatureBound(2, 1.0).check_many(at_bound).tobytes()
    for row in ([0.6, 0.81], [np.nan, 0.0], [np.inf, 0.0], [1e200, 0.0]):
        assert fast(["a", "b"], np.array([row, [0.1, 0.2]])) is None
    for labels in ([1.0, 2.0], [1.0, np.nan], [0.5, 1.0]):
        assert fast(["a", "b"], y=np.array(labels)) is None
    ridge = Ridge(0.1, label_bound=1.5)
    assert fast(["a", "b"], y=np.array([1.5, -0.3]), loss=ridge) is not None
    assert fast(["a", "b"], y=np.array([1.6, -0.3]), loss=ridge) is None
    assert fast(["a", "b"], X=np.zeros((3, 2))) is None  # lengths differ
    assert fast(["a", "b"], X=np.zeros((2, 3))) is None  # wrong dimension
    assert fast([]) is None


def test_labels_and_rows_as_the_general_path_gives_them():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 4)) / 4
    logistic, ridge = Logistic(0.01), Ridge(0.1, label_bound=2.0)
    y = rng.choice([1.0, -1.0, 0.0, -0.0], size=50)
    keys, Xf, labels = fast([f"r{i}" for i in range(50)], X, y, loss=logistic, dim=4)
    assert np.array_equal(labels, ogd.check_labels(logistic, y))
    assert Xf is X  # untouched: the caller's own array, as check_many returns it
    yr = rng.uniform(-2, 2, size=50)
    labels = fast([f"r{i}" for i in range(50)], X, yr, loss=ridge, dim=4)[2]
    assert np.array_equal(labels, ogd.check_labels(ridge, yr))
    assert fast(["a"], loss=object()) is None  # unknown loss: general path


def model(**kw):
    return PassiveOLU(dim=3, rho=1.0, noise_rng=np.random.default_rng(1), **kw)


def test_learn_many_same_state_either_path():
    """A batch the fast path takes and the same batch forced down the general one."""
    rng = np.random.default_rng(5)
    ids = random_ids(rng, 300)
    X = rng.normal(size=(len(ids), 3))
    X *= (rng.random(len(ids)) / np.linalg.norm(X, axis=1))[:, None]
    y = rng.choice([1.0, -1.0], size=len(ids))
    a, b = model(), model()
    assert a.learn_many(ids, X, y) == len(ids)
    b.learn_many(iter(ids), X, y)  # an iterator: the general path
    assert np.array_equal(a.z, b.z) and a.t == b.t
    assert np.array_equal(a.index.to_arrays()["applied_keys"], b.index.to_arrays()["applied_keys"])
    assert np.array_equal(np.sort(a.index.to_arrays()["applied_keys"]), np.sort(expected_keys(ids)))


def test_learn_many_errors_and_clipping_unchanged():
    m = model(feature_policy="clip")
    X = np.array([[3.0, 4.0, 0.0], [0.1, 0.1, 0.1]])
    assert m.learn_many(["a", "b"], X, [1, -1]) == 2  # clipped by the general path
    ref = model(feature_policy="clip")
    ref.learn_one("a", [3.0, 4.0, 0.0], 1)
    ref.learn_one("b", [0.1, 0.1, 0.1], -1)
    assert np.array_equal(m.z, ref.z)
    strict = model()
    with pytest.raises(InvalidRecordId):
        strict.learn_many(["a", ""], np.zeros((2, 3)), [1, 1])
    with pytest.raises(InvalidExample):
        strict.learn_many(["a", "b"], X, [1, 1])
    with pytest.raises(InvalidExample):
        strict.learn_many(["a", "b"], np.zeros((2, 3)), [1, 3])
    assert strict.t == 0 and len(strict.index) == 0
    assert strict.learn_many(["a\x00", "b"], np.zeros((2, 3)), [1, 1]) == 2  # NUL: the general path
    assert len(strict.index) == 2 and strict.index.pop(record_key("a\x00")) == [1]


def test_record_key_reads_the_content_of_str_subclasses():
    class Loud(str):
        def encode(self, *args, **kwargs):
            return b"something else"

    assert record_key(Loud("r-1")) == record_key("r-1")
    assert np.array_equal(fast([Loud("r-1"), "r-2"])[0], expected_keys(["r-1", "r-2"]))


def test_checked_rows_gives_what_the_general_checks_give_or_leaves_the_batch_to_them():
    """The stream's batches come with their keys: one compiled pass checks the rows and labels."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 4))
    X *= (rng.random(50) / np.linalg.norm(X, axis=1))[:, None]
    y = rng.choice([0.0, 1.0, -1.0], size=50)
    keys = rng.integers(1, 2**63, size=50, dtype=np.uint64)
    features, loss = FeatureBound(4, 1.0), Logistic(0.01)
    got = ingest.checked_rows(loss, features, keys, X, y)
    assert got is not None
    assert np.array_equal(got[0], keys) and got[1] is X
    assert np.array_equal(got[2], np.where(y == 0.0, -1.0, y))
    bad_rows = X.copy()
    bad_rows[7] = [1.0, 1e-2, 0.0, 0.0]  # over the bound (by more than a rounding): the general path rejects it
    assert ingest.checked_rows(loss, features, keys, bad_rows, y) is None
    assert ingest.checked_rows(loss, features, keys, X, np.where(y == 0.0, 2.0, y)) is None
    assert ingest.checked_rows(loss, features, keys, X.tolist(), y) is None  # not an array
    assert ingest.checked_rows(loss, features, keys, np.asfortranarray(X), y) is None
    assert ingest.checked_rows(loss, features, keys[:3], X, y) is None


@pytest.mark.parametrize(("d", "bound", "over"), [(257, 1.0, 1.0), (3, 0.3, 1 + 1e-15),
                                                  (17, 7.21, 1 + 1e-15)])
def test_rows_a_normaliser_wrote_are_clipped_as_feature_bound_clips_them(d, bound, over):
    """Rows normalised to the bound (np.linalg.norm: a share land an ulp or more over it in the
    engine's order of addition; or a hair over on purpose, where one rescaling often leaves them
    over and the ulp steps run), with negatives, zeros, subnormals and -0.0 among them: the
    compiled front's copy, clipped where it is over, is FeatureBound's bit for bit, and the
    caller's array is untouched."""
    rng = np.random.default_rng(d)
    X = rng.standard_normal((2_000, d))
    if d > 8:
        X[:, :1] = 0.0
        X[::7, 1] = -0.0
        X[::11, 2] = 5e-320
        X[::13, -1] = -5e-320
    X *= bound * over / np.linalg.norm(X, axis=1, keepdims=True)
    before = X.copy()
    features = FeatureBound(d, bound)
    general = features.check_many(X)
    norms = np.sqrt(row_sqnorms(X))
    once = X[norms > bound] * (bound / norms[norms > bound])[:, None]
    assert not np.array_equal(general, X)  # some rows were over: the case under test
    if over > 1.0:  # and for some one rescaling was not enough: the ulp steps ran
        assert (np.sqrt(row_sqnorms(once)) > bound).any()
    got = fast([f"r{i}" for i in range(2_000)], X, np.ones(2_000), features=features, dim=d)
    assert got is not None and got[1] is not X
    assert got[1].tobytes() == general.tobytes()
    assert X.tobytes() == before.tobytes()
