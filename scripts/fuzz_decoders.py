"""Fuzz the decoders of network input: frames, headers, stored messages, properties,
routes and fastjson bodies must raise only aiorocket's typed errors.

    .venv/bin/python scripts/fuzz_decoders.py --iterations 1000000 [--seed N] [--target NAME]

Prints one line per target (runs, typed errors, crashes, rate) and, for each crash
(one per distinct error location), the error and the input (hex); the inputs are also
written to --crash-dir for replay. Exit status 1 when anything crashed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from aiorocket.testing.fuzz import TARGETS, fuzz


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=1_000_000, help="inputs per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", action="append", choices=sorted(TARGETS))
    parser.add_argument("--crash-dir", type=Path, default=Path("fuzz-crashes"))
    args = parser.parse_args()
    failed = False
    for name in args.target or sorted(TARGETS):
        started = time.monotonic()
        report = fuzz(args.iterations, seed=args.seed, targets=[name])
        elapsed = time.monotonic() - started
        print(
            f"{name:<15} runs={report.runs[name]:>9,} typed_errors={report.typed_errors[name]:>9,} "
            f"crashes={len(report.crashes)} ({report.runs[name] / elapsed:,.0f}/s)",
            flush=True,
        )
        for i, crash in enumerate(report.crashes):
            failed = True
            args.crash_dir.mkdir(parents=True, exist_ok=True)
            path = args.crash_dir / f"{name}-{args.seed}-{i}.bin"
            path.write_bytes(crash.data)
            print(
                f"  CRASH {crash.error}\n    input ({len(crash.data)} bytes, {path}): "
                f"{crash.data[:200].hex()}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
