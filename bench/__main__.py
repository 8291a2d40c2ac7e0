"""Run the benches and regenerate bench/README.md's result tables from their JSON.

    python -m bench                                   # every bench, full size: bench/results + README
    python -m bench --only engine_throughput worker_throughput
    python -m bench --render-only                     # the README's tables from the JSON already there
    python -m bench --quick --out /tmp/bench          # smoke run of every bench; the README is left alone

Each bench runs as its own process (``python bench/NAME.py [--quick] --out DIR``), one after the
other, so none disturbs another's timings. Then the block of each bench that wrote its JSON is
regenerated in the README (``<!-- results:NAME -->``): text and numbers cannot drift apart. A quick
run never touches the README unless ``--readme`` names one (its numbers are not results).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from bench import _catalog

ROOT = _catalog.BENCH.parent


def main(argv: list[str] | None = None) -> int:
    names = _catalog.scripts()
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"benches to run, of {', '.join(names)}")
    p.add_argument("--quick", action="store_true", help="smoke run: every bench on small sizes, in seconds")
    p.add_argument("--out", type=Path, default=None,
                   help="directory of the JSON and PNG (default bench/results; bench/results/quick with --quick)")
    p.add_argument("--render-only", action="store_true", help="run nothing: regenerate the tables from the JSON in --out")
    p.add_argument("--readme", type=Path, default=None,
                   help="the README to regenerate (default bench/README.md; none for a quick run)")
    args = p.parse_args(argv)
    chosen = args.only or names
    results = _catalog.BENCH / "results"
    default_out = results / "quick" if args.quick else results
    out = (args.out or default_out).resolve()
    readme = args.readme or (None if args.quick else _catalog.README)

    failed = []
    if not args.render_only:
        for name in chosen:
            # --out only when it is not the bench's own default: the report records the command as typed
            cmd = [sys.executable, f"bench/{name}.py", *(["--quick"] if args.quick else []),
                   *(["--out", str(out)] if out != default_out.resolve() else [])]
            print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
            started = time.monotonic()
            code = subprocess.run(cmd, cwd=ROOT).returncode
            print(f"=== {name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
            if code:
                failed.append(name)
    if readme is not None:
        ok = [n for n in chosen if n not in failed]
        text, done = _catalog.render_readme(readme.read_text(), out, ok)
        readme.write_text(text)
        print(f"\nregenerated {len(done)} table(s) in {readme}: {', '.join(done) or 'none'}")
        missing = sorted(set(ok) - set(done))
        if missing:
            print(f"no JSON in {out} for: {', '.join(missing)}")
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
