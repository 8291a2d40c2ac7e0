"""The benchmarks (bench/README.md): ``python -m bench`` runs them; each ``bench/NAME.py`` also runs alone."""
