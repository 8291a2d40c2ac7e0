"""How format3_*.snap were made: with the tree of commit 61f409a (state format 3, JSON ledger
segments) on the path, ``python make_format3.py tests/olu/data``. Not run by the tests; kept so the
fixtures can be read and remade. Each file: codec.encode({"meta", "ledger" (the entries as that
build read them), "z"}, arrays "a/<name>" and shared groups "s/<group>/<name>")."""
import sys

import numpy as np

from worker.olu.algorithms.passive import PassiveOLU
from worker.olu.algorithms.rewind import RewindToDelete as RewindOLU
from worker.olu.privacy import ledger as ledger_module
from worker.state.codec import encode


def main(folder: str) -> None:
    ledger_module.SEGMENT_ENTRIES = 8
    rng = np.random.default_rng(0)
    for name, kw in (("passive", {}), ("rewind", {"retrain_every": 20, "train_steps": 10, "max_deletions": 200})):
        cls = {"passive": PassiveOLU, "rewind": RewindOLU}[name]
        priv = {"rho": 50.0} if name == "passive" else {"target_epsilon": 50.0}
        m = cls(dim=4, l2=0.05, radius=5.0, noise_rng=np.random.default_rng(1), **priv, **kw)
        X = rng.normal(size=(400, 4))
        X /= np.maximum(1, np.linalg.norm(X, axis=1))[:, None]
        y = np.where(X @ np.array([1.0, -2.0, 0.5, 1.0]) > 0, 1.0, -1.0)
        ids = [f"{name}-{i}" for i in range(400)]
        m.learn_many(ids, X, y)
        for j in range(0, 21 * 7, 7):
            m.unlearn_one(ids[j])
        state = m.export_state()
        arrays = {f"a/{k}": v for k, v in state["arrays"].items()}
        for g, arrs in state["shared"].items():
            arrays.update({f"s/{g}/{k}": v for k, v in arrs.items()})
        header = {"meta": state["meta"], "ledger": list(m.ledger), "z": m.z.tolist()}
        open(f"{folder}/format3_{name}.snap", "wb").write(encode(header, arrays))
        print(name, len(m.ledger), m.ledger.sealed, state["meta"]["format"])


if __name__ == "__main__":  # pytest's --doctest-modules imports this file: nothing runs then
    main(sys.argv[1])
