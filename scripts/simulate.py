"""Run the fault simulator (docs/simulator.md): many seeds, a summary, failures with seeds.

    python scripts/simulate.py --runs 200 --workload pop_remoting
    python scripts/simulate.py --seed 4 --workload pop_remoting     # replay one seed
    python scripts/simulate.py --against cce0824 --seed 0 --workload grpc_receive

``--against COMMIT`` runs today's simulator on an old client: a scratch checkout of
COMMIT (``git worktree add --detach`` in a temporary directory, removed afterwards)
with today's ``aiorocket/testing/sim/`` and the fakes it builds on laid over it, this
script re-run there with the other options.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from aiorocket.testing.sim import INVARIANTS, WORKLOADS, run, shrink

#: today's files laid over an old checkout: the simulator and the fakes it builds on
OVERLAY = ("aiorocket/testing/sim", "aiorocket/testing/fake_remoting.py",
           "aiorocket/testing/fake_grpc.py", "scripts/simulate.py")  # fmt: skip


def against(commit: str, argv: list[str]) -> int:
    """Run this script with ``argv`` on a scratch checkout of ``commit`` overlaid with
    today's simulator (``OVERLAY``), its ``aiorocket`` first on the path."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="aiorocket-sim-") as scratch:
        tree = Path(scratch) / "tree"
        git = ["git", "-C", str(root), "worktree"]
        subprocess.run([*git, "add", "--detach", "--quiet", str(tree), commit], check=True)
        try:
            for path in OVERLAY:
                src, dst = root / path, tree / path
                if src.is_dir():
                    shutil.rmtree(dst, ignore_errors=True)
                    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dst)
            env = {**os.environ, "PYTHONPATH": str(tree)}
            print(f"today's simulator against {commit} (scratch checkout {tree})", flush=True)
            cmd = [sys.executable, str(tree / "scripts/simulate.py"), *argv]
            return subprocess.run(cmd, cwd=tree, env=env, check=False).returncode
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, help="run (replay) this seed only")
    parser.add_argument("--first", type=int, default=0, help="the first seed of --runs")
    parser.add_argument("--workload", choices=WORKLOADS, default="pop_remoting")
    parser.add_argument("-v", "--verbose", action="store_true", help="every run's schedule")
    parser.add_argument("--shrink", action="store_true",
                        help="rerun each failure without the faults it does not need")
    parser.add_argument("--against", metavar="COMMIT",
                        help="run on a scratch checkout of COMMIT (an old client)")
    args = parser.parse_args()
    if args.against:  # the same options, less --against, in the scratch checkout
        argv = sys.argv[1:]
        rest = [a for i, a in enumerate(argv) if not a.startswith("--against")
                and (i == 0 or argv[i - 1] != "--against")]  # fmt: skip
        return against(args.against, rest)
    logging.disable(logging.CRITICAL)
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.runs)
    started = time.monotonic()
    failed, faults, by_invariant = [], Counter[str](), Counter[str]()
    for seed in seeds:
        report = run(seed, args.workload)
        faults.update(f.kind for f in report.schedule.faults)
        if args.verbose or not report.ok or args.seed is not None:
            print(report, flush=True)
        if not report.ok:
            failed.append(seed)
            if args.shrink:
                print("shrunk to:\n" + str(shrink(report)), flush=True)
            by_invariant.update({v.invariant for v in report.violations} or {"crash"})
    minutes = (time.monotonic() - started) / 60
    print(f"\n{len(seeds)} runs of {args.workload} in {minutes * 60:.0f} s "
          f"({len(seeds) / max(minutes, 1e-9):.0f} runs/min); {len(INVARIANTS)} invariants "
          f"checked per run; faults drawn: {sum(faults.values())} "
          f"({', '.join(f'{k} {n}' for k, n in faults.most_common())})")  # fmt: skip
    print(f"failed: {len(failed)} seeds {failed[:50]}; by invariant: {dict(by_invariant)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
