#!/bin/sh
# The whole suite: environment, lint, types, the real broker (provisioned by the
# pytest session fixture), unit and integration tests on asyncio and trio.
set -eu
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
.venv/bin/ruff check aiorocket tests benchmarks examples
.venv/bin/mypy --strict aiorocket
# Integration tests must never be skipped for want of a broker when this script runs.
export AIOROCKET_REQUIRE_BROKER=1
# ...and the start/stop test of a throwaway second cluster runs too.
export AIOROCKET_TEST_THROWAWAY=1
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: treating as a failure" >&2
    exit 1
fi
exit "$status"
