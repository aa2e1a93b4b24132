"""Run the fault simulator (docs/simulator.md): many seeds, a summary, failures with seeds.

    python scripts/simulate.py --runs 200 --workload pop_remoting
    python scripts/simulate.py --seed 4 --workload pop_remoting     # replay one seed
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter

from aiorocket.testing.sim import INVARIANTS, WORKLOADS, run, shrink


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, help="run (replay) this seed only")
    parser.add_argument("--first", type=int, default=0, help="the first seed of --runs")
    parser.add_argument("--workload", choices=WORKLOADS, default="pop_remoting")
    parser.add_argument("-v", "--verbose", action="store_true", help="every run's schedule")
    parser.add_argument("--shrink", action="store_true",
                        help="rerun each failure without the faults it does not need")
    args = parser.parse_args()
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
