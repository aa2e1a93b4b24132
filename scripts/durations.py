"""Where a pytest run's time went, from its JUnit XML report (scripts/test.sh writes one).

    python scripts/durations.py build/test-report/pytest.xml [--top 25]

Prints the total per test directory, then the files and the tests that took longest
(a test's time is its setup, call and teardown: a module fixture that starts a cluster
counts in its module's first test). The CI log keeps this summary; the XML itself goes
with CI's clone.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path


def read(report: Path) -> list[tuple[str, str, float]]:
    """(file, test name, seconds) of every test case in ``report``."""
    cases = []
    for case in ET.parse(report).iter("testcase"):
        # classname is the dotted module path (plus a class, if any): tests.unit.test_x
        parts = case.get("classname", "").split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()  # a class name, or a module not named test_*
        module = "/".join(parts) + ".py" if parts else case.get("classname", "?")
        cases.append((module, case.get("name", "?"), float(case.get("time", "0"))))
    return cases


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    if not args.report.exists():
        print(f"no report at {args.report}", file=sys.stderr)
        return 1
    cases = read(args.report)
    total = sum(t for _, _, t in cases)
    by_dir: defaultdict[str, float] = defaultdict(float)
    by_file: defaultdict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    for module, _, t in cases:
        by_dir[module.rsplit("/", 1)[0]] += t
        by_file[module] += t
        counts[module] += 1
    print(f"== {len(cases)} tests, {total:.0f} s in tests (setup + call + teardown)")
    for directory, t in sorted(by_dir.items(), key=lambda d: -d[1]):
        print(f"{t:8.0f} s {100 * t / max(total, 1e-9):5.1f}%  {directory}/")
    print(f"== the {args.top} slowest files")
    for module, t in sorted(by_file.items(), key=lambda f: -f[1])[: args.top]:
        print(f"{t:8.1f} s  {counts[module]:4d} tests  {module}")
    print(f"== the {args.top} slowest tests")
    for module, name, t in sorted(cases, key=lambda c: -c[2])[: args.top]:
        print(f"{t:8.1f} s  {module}::{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
