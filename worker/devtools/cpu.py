"""What this process's numeric libraries picked for its CPU: OpenBLAS's kernel, numpy's SIMD
dispatch and numba's code-generation target. None of them may change a result the engine promises
bit for bit (docs/worker.md 4.3); CI prints them so a run says which machine it proved that on.

``python -m worker.devtools.cpu`` prints one line.
"""

from __future__ import annotations

import os


def personality() -> dict[str, str]:
    import numba
    import numpy as np
    from llvmlite import binding as ll

    try:
        from threadpoolctl import threadpool_info

        blas = next((f"{i['internal_api']} {i.get('version')} {i.get('architecture')}"
                     for i in threadpool_info()
                     if i.get("user_api") == "blas"), "none")
    except ImportError:  # threadpoolctl comes with scikit-learn (the bench extra)
        blas = f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(default)')}"
    from numpy._core._multiarray_umath import __cpu_targets_info__ as targets

    features = ll.get_host_cpu_features()
    has = {name: "yes" if features.get(name) else "no" for name in ("avx512f", "fma")}
    return {
        "blas": blas,
        "numpy": f"{np.__version__} exp(float64) dispatch {targets['exp']['dd']['current']}",
        "numba": f"{numba.__version__} target {numba.config.CPU_NAME or ll.get_host_cpu_name()} "
                 f"(avx512f={has['avx512f']}, fma={has['fma']})",
    }


def main() -> None:
    print("; ".join(f"{k}: {v}" for k, v in personality().items()))


if __name__ == "__main__":
    main()
