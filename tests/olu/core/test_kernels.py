"""The compiled OGD kernel (worker.olu.core.kernels) against the pure-numpy reference ``_learn``.

- kernel vs reference, every loss and schedule kind, with projection, tombstoned inserts, forced
  tail merges and interleaved deletions: weights within 1e-10 relative, identical t, counters and
  applied-index contents;
- kernel learn_many vs kernel learn_one in a loop: bit-identical;
- hooks: a model that stores examples in ``_after_learn`` sees every applied example, in order;
- the applied-record index stays within 16 bytes per record at 1,000,000 records (a memory bound,
  not a timing);
- the vectorised record keys are bit-identical to ``record_key``.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import worker.olu.core.index as index_module
import worker.olu.core.tombstones as tombstones_module
from worker.compiled import jit
from worker.olu import MAX_ID_BYTES, record_key, record_keys
from worker.olu.algorithms.passive import PassiveOLU
from worker.olu.core.kernels import ogd
from worker.olu.core.losses import Logistic, Ridge
from worker.olu.exceptions import InvalidLabel, InvalidRecordId

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository

D = 6

CONFIGS = {
    "logistic-sc": dict(loss="logistic", l2=0.05, radius=10.0),
    "logistic-sc-t0=0-clipped": dict(loss="logistic", l2=0.5, radius=0.3, t0=0.0),
    "logistic-lam0-convex": dict(loss="logistic", l2=0.0, radius=10.0),
    "logistic-lam0-convex-clipped": dict(loss="logistic", l2=0.0, radius=0.4),
    "logistic-lam-convex-clipped": dict(loss="logistic", l2=0.02, radius=0.5, schedule="convex"),
    "logistic-constant-clipped": dict(loss="logistic", l2=0.01, radius=0.5, schedule="constant", step=0.7),
    "ridge-sc": dict(loss="ridge", l2=0.1, radius=5.0, label_bound=2.0),
    "ridge-sc-clipped": dict(loss="ridge", l2=0.2, radius=0.25, t0=3.5),
    "ridge-convex-clipped": dict(loss="ridge", l2=0.1, radius=0.3, schedule="convex"),
    "ridge-constant-clipped": dict(loss="ridge", l2=0.1, radius=0.3, schedule="constant", step=0.3),
    # K x d parameters: string classes, integer classes out of order, two classes
    "softmax-sc": dict(loss="softmax", classes=["a", "b", "c", "d", "e"], l2=0.05, radius=10.0),
    "softmax-lam0-convex-clipped": dict(loss="softmax", classes=[30, 10, 20], l2=0.0, radius=0.4),
    "softmax-constant-clipped": dict(loss="softmax", classes=[7, -1], l2=0.01, radius=0.5, schedule="constant",
                                     step=0.7),
}
CLIPPED = {name for name in CONFIGS if name.endswith("clipped")}


def stream(n, loss="logistic", seed=0, d=D):
    """``loss``: a loss name, or a config (a softmax config's labels are its classes)."""
    config = loss if isinstance(loss, dict) else {"loss": loss}
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X *= (rng.random(n) / np.linalg.norm(X, axis=1))[:, None]  # norms uniform in [0, 1)
    if config["loss"] == "softmax":
        classes = config["classes"]
        best = np.argmax(X @ rng.normal(size=(d, len(classes))) * 3 + 0.3 * rng.normal(size=(n, len(classes))), axis=1)
        return [f"r-{seed}-{i}" for i in range(n)], X, [classes[k] for k in best]
    w = rng.normal(size=d) * 3
    score = X @ w + 0.3 * rng.normal(size=n)
    y = np.where(score > 0, 1.0, -1.0) if config["loss"] == "logistic" else np.clip(score, -1.0, 1.0)
    ids = [f"r-{seed}-{i}" for i in range(n)]
    return ids, X, y


def model(config, reference=False, **extra):
    m = PassiveOLU(dim=D, rho=1.0, noise_rng=np.random.default_rng(11), **config, **extra)
    if reference:
        m.use_kernel = False
        m.clipped, project = 0, m.ball.project

        def counting_project(z):  # counts the steps where the projection moved the iterate
            out = project(z)
            m.clipped += out is not z
            return out

        m.ball.project = counting_project
    return m


def index_state(idx):
    tail_keys, tail_steps, tail_len = idx.tail_buffers()
    runs = [a for r in idx.runs for a in (r.keys, r.steps, r.dead_positions())]
    return [*runs, tail_keys[:tail_len].copy(), tail_steps[:tail_len].copy()]


def assert_same_state(a, b, exact=True):
    """Bit for bit: the kernel and the reference add in one order (worker/olu/arith.py)."""
    assert np.array_equal(a.z, b.z) and a.z.tobytes() == b.z.tobytes()
    assert a.t == b.t
    assert a.counters == b.counters
    for u, v in zip(index_state(a.index), index_state(b.index)):
        assert u.dtype == v.dtype and np.array_equal(u, v)
    assert np.array_equal(a.tombstones.keys, b.tombstones.keys)
    assert a.index.nbytes == b.index.nbytes


def drive(m, ids, X, y, batch, deletions=True, one_by_one=False):
    """Feed the stream in batches; before it, delete some future ids (their inserts get
    skipped); after each batch delete a few applied ids and a few not yet seen."""
    n = len(ids)
    if deletions:
        for i in range(3, n, 97):
            m.unlearn_one(ids[i])
    for start in range(0, n, batch):
        stop = min(start + batch, n)
        if one_by_one:
            for j in range(start, stop):
                m.learn_one(ids[j], X[j], y[j])
        else:
            m.learn_many(ids[start:stop], X[start:stop], y[start:stop])
        if deletions:
            for j in range(start, stop, 41):
                m.unlearn_one(ids[j])
            if stop + 7 < n:
                m.unlearn_one(ids[stop + 7])


@pytest.fixture(autouse=True)
def kernel_enabled(monkeypatch):
    """These tests compare both paths, so they ignore OLU_REFERENCE_KERNEL from the environment."""
    monkeypatch.setattr(jit, "FORCE_REFERENCE", False)


@pytest.fixture
def tiny_tail(monkeypatch):
    """Force many index merges: models built after this start with an 8-slot tail (runs up to 128),
    and tombstones that move from recent to the base every 5 deletions (both arrays are searched)."""
    monkeypatch.setattr(index_module, "TAIL_SIZE", 8)
    monkeypatch.setattr(index_module, "MAX_RUN", 128)
    monkeypatch.setattr(tombstones_module, "RECENT_KEYS", 5)


# ------------------------------------------------------------------ the tombstone filter
def test_the_filter_merge_sets_passes_every_key_it_holds_and_rules_most_others_out():
    """kernels/merge.py sets the bits the OGD kernel reads (worker/compiled/sorted_keys.py): every
    key added passes, and a filter of 64 bits a key rules out most others."""
    from worker.compiled.sorted_keys import filter_passes, filter_shift
    from worker.olu.core.kernels import merge

    rng = np.random.default_rng(3)
    for words in (np.zeros(64, np.uint64), np.zeros(1 << 15, np.uint64)):
        keys = rng.integers(1, 2**64 - 1, words.shape[0], dtype=np.uint64, endpoint=True)
        merge.filter_add(words, keys)
        shift = filter_shift(words)
        assert all(filter_passes(words, shift, k) for k in keys)
        others = rng.integers(1, 2**64 - 1, 2000, dtype=np.uint64, endpoint=True)
        assert np.mean([filter_passes(words, shift, k) for k in others]) < 0.05


def test_learning_skips_exactly_the_tombstoned_keys_with_many_tombstones():
    """Thousands of tombstones in the base and in recent: the kernel skips exactly the tombstoned
    inserts, also among the ~1.5% of other keys the filter cannot rule out (then the binary search
    decides), and applies the rest as the reference does."""
    rng = np.random.default_rng(8)
    n = 6000
    X = rng.normal(size=(n, D)) * 0.1
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    keys = rng.integers(1, 2**64 - 1, n, dtype=np.uint64)
    deleted = set(keys[::2].tolist())
    extra = rng.integers(1, 2**64 - 1, 20_000, dtype=np.uint64).tolist()  # tombstones of other ids
    models = [model(CONFIGS["logistic-sc"]), model(CONFIGS["logistic-sc"], reference=True)]
    for m in models:
        m.tombstones = tombstones_module.KeySet(recent_keys=4096)  # base and recent both in use
        for k in [*extra, *deleted]:
            m.tombstones.add(k)
        assert len(m.tombstones.base) and len(m.tombstones.recent)
        assert m._learn_batch(keys, X, y) == n - len(deleted)
        assert m.counters["skipped_deleted"] == len(deleted)
    kernel, reference = models
    assert_same_state(kernel, reference)
    live = [k for k in keys.tolist() if k not in deleted]
    assert sorted(kernel.index.to_arrays()["applied_keys"].tolist()) == sorted(live)
    passed = [k for k in live if _filter_passes(kernel.tombstones.filter, k)]
    assert passed  # the binary search behind the filter was exercised, and said "learn it"


def _filter_passes(words, key):
    from worker.compiled.sorted_keys import filter_passes, filter_shift

    return bool(filter_passes(words, filter_shift(words), np.uint64(key)))


# ------------------------------------------------------------------ kernel vs reference
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_kernel_matches_numpy_reference(name, tiny_tail):
    config = CONFIGS[name]
    ids, X, y = stream(3000, config, seed=1)
    fast, ref = model(config), model(config, reference=True)
    assert fast.kernel_plan() is not None and ref.kernel_plan() is None
    drive(fast, ids, X, y, batch=257)
    drive(ref, ids, X, y, batch=257)
    assert_same_state(fast, ref)
    assert fast.counters["skipped_deleted"] > 0  # tombstoned inserts were skipped
    assert len(fast.tombstones.base) > 0 and len(fast.tombstones.recent) > 0
    assert len(fast.index.runs) > 3 and max(len(r) for r in fast.index.runs) > 32  # many tails, merged runs
    if name in CLIPPED:
        assert ref.clipped > 0  # the projection was active
    # and the released weights after more steps, merged index included
    assert np.array_equal(fast.index.to_arrays()["applied_keys"], ref.index.to_arrays()["applied_keys"])
    assert np.array_equal(fast.index.to_arrays()["applied_steps"], ref.index.to_arrays()["applied_steps"])


@pytest.mark.parametrize("d", [8, 21, 300])
@pytest.mark.parametrize("name", ["logistic-sc", "logistic-sc-t0=0-clipped", "ridge-constant-clipped",
                                  "softmax-sc", "softmax-lam0-convex-clipped"])
def test_kernel_matches_numpy_reference_in_lanes(name, d, tiny_tail, monkeypatch):
    """Widths the eight lanes reach (whole blocks, blocks and a tail): still bit for bit."""
    monkeypatch.setattr(sys.modules[__name__], "D", d)
    config = CONFIGS[name]
    ids, X, y = stream(1500, config, seed=2, d=d)
    fast, ref = model(config), model(config, reference=True)
    drive(fast, ids, X, y, batch=257)
    drive(ref, ids, X, y, batch=257)
    assert_same_state(fast, ref)
    if name in CLIPPED:
        assert ref.clipped > 0


@pytest.mark.parametrize("name", ["logistic-sc", "logistic-lam0-convex-clipped", "ridge-constant-clipped",
                                  "softmax-constant-clipped"])
def test_learn_one_kernel_matches_reference(name):
    config = CONFIGS[name]
    ids, X, y = stream(400, config, seed=2)
    fast, ref = model(config), model(config, reference=True)
    drive(fast, ids, X, y, batch=50, one_by_one=True)
    drive(ref, ids, X, y, batch=50, one_by_one=True)
    assert_same_state(fast, ref)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_learn_many_bit_identical_to_learn_one_loop(name, tiny_tail):
    config = CONFIGS[name]
    ids, X, y = stream(2000, config, seed=3)
    many, one = model(config), model(config)
    drive(many, ids, X, y, batch=333)
    drive(one, ids, X, y, batch=333, one_by_one=True)
    assert_same_state(many, one)


def test_reference_switches():
    m = model(CONFIGS["logistic-sc"])
    assert m.kernel_plan() is not None
    with jit.reference():
        assert m.kernel_plan() is None
    assert m.kernel_plan() is not None

    class Custom(PassiveOLU):
        algorithm = "test-kernels-custom-learn"
        calls = 0

        def _learn(self, key, x, y):  # a subclass that changes the step keeps its own step
            Custom.calls += 1
            return super()._learn(key, x, y)

    c = Custom(dim=D)
    ids, X, y = stream(10, seed=4)
    c.learn_many(ids, X, y)
    c.learn_one("extra", X[0], y[0])
    assert Custom.calls == 11 and c.t == 11


def test_environment_forces_reference():
    code = "from worker.compiled import jit; from worker.olu.core.kernels import ingest, ogd, warmup; print(jit.FORCE_REFERENCE)"
    env = {**os.environ, "OLU_REFERENCE_KERNEL": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "True", out.stderr


def test_step_overflow_leaves_consistent_state():
    m = model(CONFIGS["logistic-sc"])
    m.t = 2**32 - 2
    ids, X, y = stream(3, seed=5)
    with pytest.raises(OverflowError):
        m.learn_many(ids, X, y)
    assert m.t == 2**32 - 1 and len(m.index) == 1 and m.counters["applied"] == 1
    assert m.index.pop(record_key(ids[0])) == [2**32 - 1]


def test_empty_batch():
    m = model(CONFIGS["logistic-sc"])
    assert m.learn_many([], np.zeros((0, D)), []) == 0
    assert m.t == 0 and np.array_equal(m.z, np.zeros(D))


# ------------------------------------------------------------------------------- hooks
class Recorder(PassiveOLU):
    """Stores every applied example, the way active algorithms retain them."""

    algorithm = "test-kernels-recorder"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def _after_learn(self, key, step, x, y):
        self.seen.append((key, step, np.array(x), y))


class BatchRecorder(Recorder):
    algorithm = "test-kernels-batch-recorder"

    def _after_learn_batch(self, keys, steps, X, y):
        assert np.all(np.diff(steps) > 0)
        self.batches = getattr(self, "batches", 0) + 1
        super()._after_learn_batch(keys, steps, X, y)


@pytest.mark.parametrize("cls", [Recorder, BatchRecorder])
def test_after_learn_sees_every_applied_example_in_order(cls, tiny_tail):
    config = CONFIGS["logistic-sc-t0=0-clipped"]
    ids, X, y = stream(1500, seed=6)
    fast = cls(dim=D, noise_rng=np.random.default_rng(1), **config)
    ref = cls(dim=D, noise_rng=np.random.default_rng(1), **config)
    ref.use_kernel = False
    drive(fast, ids, X, y, batch=128)
    drive(ref, ids, X, y, batch=128)
    assert_same_state(fast, ref)
    assert len(fast.seen) == len(ref.seen) == fast.counters["applied"] == fast.t
    for (k1, s1, x1, y1), (k2, s2, x2, y2) in zip(fast.seen, ref.seen):
        assert (k1, s1, y1) == (k2, s2, y2) and np.array_equal(x1, x2)
        assert type(k1) is int and type(s1) is int and type(y1) is float
    assert [s for _, s, _, _ in fast.seen] == list(range(1, fast.t + 1))
    skipped = {record_key(ids[i]) for i in range(3, len(ids), 97)}
    assert not skipped & {k for k, _, _, _ in fast.seen}
    if cls is BatchRecorder:
        assert fast.batches == -(-len(ids) // 128)  # one call per batch, not per row


# ------------------------------------------------------------------------------ memory
def test_applied_index_at_most_16_bytes_per_record():
    m = model(CONFIGS["logistic-sc"])
    n, batch = 1_000_000, 65_536
    rng = np.random.default_rng(7)
    keys = rng.integers(1, 2**63, size=n, dtype=np.uint64)
    X, y = stream(batch, seed=8)[1:]
    for start in range(0, n, batch):
        k = keys[start:start + batch]
        m._learn_batch(k, X[:len(k)], y[:len(k)])
    assert m.t == len(m.index) == n
    per_record = m.index.nbytes / len(m.index)
    assert per_record <= 16, per_record
    m.index.merge()
    per_record = m.index.nbytes / len(m.index)
    assert per_record <= 16, per_record
    assert np.array_equal(m.index.to_arrays()["applied_keys"], np.sort(keys))


# ------------------------------------------------------------------------- record keys
def test_record_keys_bit_identical_to_record_key():
    rng = np.random.default_rng(9)
    ids = [f"r-{i}" for i in range(5000)]
    ids += ["".join(chr(c) for c in rng.integers(32, 127, size=n)) for n in
            (1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 1023, 1024)]
    ids += ["é", "日本語-7", "\ud800", "\udc00\ud800", "a\x00", "\x00", "é" * 512, "😀" * 256, "x" * MAX_ID_BYTES]
    ids += ["".join(chr(c) for c in rng.integers(1, 0x10FFFF, size=n)) for n in (1, 5, 40, 100)]
    expected = np.array([record_key(r) for r in ids], np.uint64)
    assert np.array_equal(record_keys(ids), expected)
    assert np.array_equal(record_keys(iter(ids)), expected)
    assert np.array_equal(record_keys(ids[-7:]), expected[-7:])  # the non-ASCII path alone

    class Sub(str):
        pass

    assert np.array_equal(record_keys([Sub("r-1"), "r-2"]), [record_key("r-1"), record_key("r-2")])
    assert record_keys([]).dtype == np.uint64


@pytest.mark.parametrize("bad", ["", "x" * (MAX_ID_BYTES + 1), "é" * 513, 5, None, b"r-1"])
def test_record_keys_rejects_like_record_key(bad):
    ids = ["r-1", bad, "r-3"]
    with pytest.raises(InvalidRecordId) as want:
        [record_key(r) for r in ids]
    with pytest.raises(InvalidRecordId) as got:
        record_keys(ids)
    assert str(got.value) == str(want.value)


def test_check_labels_matches_label():
    logistic, ridge = Logistic(0.01), Ridge(0.1, label_bound=1.5)
    y = np.array([1, -1, 0, 1.0, -0.0, 0.0])
    assert np.array_equal(ogd.check_labels(logistic, y), [logistic.label(v) for v in y])
    assert np.array_equal(ogd.check_labels(logistic, [True, False]), [1.0, -1.0])
    r = np.array([1.5, -1.5, 0.3, 0.0])
    assert np.array_equal(ogd.check_labels(ridge, r), [ridge.label(v) for v in r])
    for loss, bad in [(logistic, [1, 2]), (logistic, [np.nan]), (ridge, [0.0, 1.6]),
                      (ridge, [np.inf]), (logistic, ["a"])]:
        with pytest.raises(InvalidLabel):
            ogd.check_labels(loss, bad)


# ------------------------------------------------------------------------- numba cache
def test_kernels_work_without_a_writable_cache_dir():
    """Read-only install with no writable cache dir: numba would raise at import; we compile
    without the disk cache instead."""
    code = textwrap.dedent("""
        import numba.core.caching as caching

        def read_only(self):
            raise PermissionError("read-only file system")

        caching._CacheLocator.ensure_cache_path = read_only
        import numpy as np
        from worker.compiled import jit; from worker.olu.core.kernels import ingest, ogd, warmup
        from worker.olu.algorithms.passive import PassiveOLU
        m = PassiveOLU(dim=2)
        m.learn_many(["a", "b"], [[0.6, 0.8], [0.8, -0.6]], [1, -1])
        print(jit.CACHE_ENABLED, m.t, m.kernel_plan() is not None)
    """)
    root = ROOT
    env = {k: v for k, v in os.environ.items() if k not in ("OLU_REFERENCE_KERNEL", "NUMBA_CACHE_DIR")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "2", "True"]
    assert "numba cache disabled" in out.stderr


# ------------------------------------------------------------------ warm-up covers production
WARM_UP_COVERS = textwrap.dedent("""
    import numpy as np
    import numba
    import worker.olu.core.index as index_module
    import worker.olu.core.tombstones as tombstones_module
    from worker.olu import load_model
    from worker.compiled import blake2b, sorted_keys
    from worker.olu.core.kernels import ingest, merge, mixed_pass, ogd, sparse_ogd, warmup
    from worker.olu.algorithms.active import ActiveD2D
    from worker.olu.algorithms.passive import PassiveOLU

    def versions():
        return {f"{m.__name__}.{name}": len(d.signatures) for m in (blake2b, ingest, merge, ogd, sorted_keys)
                for name, d in vars(m).items() if isinstance(d, numba.core.registry.CPUDispatcher)}

    warmup.warm_up()
    warmup.warm_up_sparse()  # a worker with OLU_SPARSE_INPUT
    before = versions()
    index_module.TAIL_SIZE, index_module.MAX_RUN, tombstones_module.RECENT_KEYS = 8, 128, 5

    def frozen_copy(state):  # as read back from a store: every array read-only
        def ro(a):
            a = np.array(a)
            a.flags.writeable = False
            return a
        return {"meta": state["meta"], "arrays": {k: ro(v) for k, v in state["arrays"].items()},
                "shared": {g: {k: ro(v) for k, v in arrs.items()} for g, arrs in state["shared"].items()}}

    rng = np.random.default_rng(0)
    X = rng.normal(size=(900, 3)) / 4
    y = np.where(rng.random(900) < 0.5, 1.0, -1.0)
    ids = [f"r{i}" for i in range(900)]
    m = PassiveOLU(dim=3, l2=0.1, radius=5.0, rho=1.0, noise_rng=rng)
    for start in range(0, 900, 100):  # merges (paced and whole), tombstones moving to the base
        m.learn_many(ids[start:start + 100], X[start:start + 100], y[start:start + 100])
        for i in range(start, start + 100, 13):
            m.unlearn_one(ids[i])
        m.unlearn_one(f"future-{start}")
        if start == 400:
            m = load_model(frozen_copy(m.export_state()), noise_rng=rng)
    # a poll batch's inserts and deletes in one pass (core/mixed.py), on frozen runs and base
    from worker.olu import record_key
    from worker.olu.core.mixed import learn_and_unlearn
    index_module.TAIL_SIZE = 1 << 10  # room for the pass
    m = load_model(frozen_copy(m.export_state()), noise_rng=rng)
    batch = [f"b{i}" for i in range(40)]
    keys, Xb, yb = m.prepare_batch(batch, X[:40], y[:40])
    dels = [ids[851], "b3", "nobody"]  # an earlier record, one of this batch's, one never seen
    done = learn_and_unlearn(m, keys, Xb, yb, [(0, 10), (11, 20), (21, 30), (31, 40)], [10, 20, 30],
                             [record_key(r) for r in dels], dels)
    assert [d.outcome for d in done.deletions] == ["noised", "noised", "not_applied"]
    a = ActiveD2D(dim=3, l2=0.1, radius=5.0, max_deletions=10, rho=1.0, noise_rng=rng)
    a.learn_many(ids[:50], X[:50], y[:50])
    a.unlearn_one(ids[40])
    assert a.unlearn_one(ids[3]).outcome == "exact"  # out of order: replayed by the kernel
    from worker.olu.core.sparse import SparseRows  # sparse rows: learned, deleted, restored frozen, learned
    s = PassiveOLU(dim=30, l2=0.1, radius=5.0, rho=1.0, noise_rng=rng)
    rows = SparseRows.from_rows([([i % 29, 29], [0.3, 0.4]) for i in range(300)])
    for start in range(0, 300, 60):
        s.learn_many(ids[start:start + 60], rows[start:start + 60], y[start:start + 60])
        s.unlearn_one(ids[start + 5])
        if start == 120:
            s = load_model(frozen_copy(s.export_state()), noise_rng=rng)
    print(before == versions(), before, versions())
""")


def test_warm_up_compiles_every_version_production_uses():
    """numba compiles one version per argument types, read-only arrays included; a version that
    warm_up misses is compiled inside a batch (a stall of 0.1-0.3 s, bench/delete_latency.py).
    A fresh interpreter, so no other test's calls count."""
    root = ROOT
    out = subprocess.run([sys.executable, "-c", WARM_UP_COVERS], capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("True"), out.stdout


# ------------------------------------------------------------- the same bits on every CPU
NO_FUSED_OPS = textwrap.dedent("""
    import re
    import numba
    from worker.features.spec import parse_spec
    from worker.formats import framed_kernel
    from worker.compiled import blake2b, sorted_keys
    from worker.olu.core.kernels import ingest, merge, mixed_pass, ogd, sparse_ogd, warmup
    from worker.olu.batches import quality as loss_kernel
    from worker.stream.input import derived_kernel, framed_scan, insert_kernel, json_number, named_kernel, scan

    warmup.warm_up()
    spec = parse_spec({"features": [{"name": "a", "type": "numeric", "range": [0, 1]}], "bound": 0.5})
    scan.warm_up(features=spec)
    scan.warm_up(sparse=True)  # the sparse x reader
    for sparse in (False, True):  # the dense derived rows, and the CSR ones
        scan.warm_up(features=parse_spec({"features": [{"name": "a", "type": "numeric", "range": [0, 1]}],
                                          "derived": [{"type": "fourier", "fields": ["a"], "components": 4,
                                                       "bandwidth": 1.0, "seed": 1}]}), sparse=sparse)
    framed_scan.warm_up_reader("avro")
    framed_scan.warm_up_reader("protobuf")
    from worker.olu.algorithms.passive import PassiveOLU
    from worker.olu.core.sparse import SparseRows
    sparse = SparseRows.from_rows([([0, 9], [0.3, 0.4]), ([2], [1.5])])  # the sparse step, its checks and a clip
    PassiveOLU(dim=10, rho=1.0, feature_policy="clip").learn_many(["a", "b"], sparse, [1.0, 0.0])
    fused = re.compile(r"\\bv?fn?m(add|sub)[0-9]{3}[sp][ds]\\b")
    found, versions = [], 0
    for module in (blake2b, ingest, merge, ogd, sparse_ogd, mixed_pass, sorted_keys, loss_kernel, insert_kernel, named_kernel,
                   json_number, framed_kernel, derived_kernel):
        for name, d in vars(module).items():
            if isinstance(d, numba.core.registry.CPUDispatcher):
                for asm in d.inspect_asm().values():
                    versions += 1
                    found += [f"{module.__name__}.{name}: {m.group(0)}" for m in fused.finditer(asm)]
    print(versions, found[:5])
""")


def test_compiled_kernels_hold_no_fused_multiply_add():
    """fastmath=False: LLVM neither reorders a sum nor fuses a multiply and an add, whatever the
    host (AVX2 and AVX-512 have FMA), so the reference's separate roundings are the kernels' too.
    A fresh cache, so the generated code can be read (numba hides that of cached kernels)."""
    root = ROOT
    with tempfile.TemporaryDirectory() as cache:
        env = {**{k: v for k, v in os.environ.items() if k != "OLU_REFERENCE_KERNEL"}, "NUMBA_CACHE_DIR": cache}
        out = subprocess.run([sys.executable, "-c", NO_FUSED_OPS], env=env, capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr
    versions, found = out.stdout.split(" ", 1)
    assert int(versions) >= 10 and found.strip() == "[]", out.stdout
