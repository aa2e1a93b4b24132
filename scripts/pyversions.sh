#!/bin/sh
# The other supported Pythons (the main .venv's 3.11 runs the whole suite): for each, a
# venv .venv-<X.Y> with the package, every extra and the `test` dependency group, then
#   imports  each extra's modules (an extra that cannot install is named in README.md);
#   unit     tests/unit (but the docs site, built once by 3.11's mkdocs; of the simulator's
#            fixed seeds, the first 3 of each workload);
#   again    the unit tests that failed in the last `unit` run, once more (all of them if
#            it did not finish): scripts/test.sh runs `unit` niced beside the main suite,
#            where a test's real-time window may pass while it is starved of the CPU;
#            the first run's failures stay in its log;
#   smoke    the real-broker smoke set (pytest -m smoke: produce, consume with a handler
#            and with `async for`, gRPC, trio) against the cluster in $AIOROCKET_BROKER_DIR
#            or /tmp/aiorocket-broker-<uid> (scripts/test.sh starts one for its session).
#   ./scripts/pyversions.sh                      # 3.10 3.12 3.13, every part
#   ./scripts/pyversions.sh imports,unit         # some parts (imports, unit, again, smoke)
#   AIOROCKET_PYTHONS="3.10" ./scripts/pyversions.sh smoke -x   # more pytest arguments
# The interpreters come from ~/.pyenv/versions (or pythonX.Y on PATH). A missing one fails
# under CI=true / AIOROCKET_REQUIRE_BROKER=1 and is skipped with a warning otherwise.
# Python 3.14 is not tested: no registry this project reaches serves a CPython 3.14 build
# (see README.md, "Platforms").
set -eu
cd "$(dirname "$0")/.."
versions="${AIOROCKET_PYTHONS:-3.10 3.12 3.13}"
parts="imports unit smoke"
case "${1:-}" in imports*|unit*|again*|smoke*) parts=$(echo "$1" | tr , ' '); shift ;; esac
# Each extra's modules (pyproject.toml's [project.optional-dependencies]).
extras="fast spark grpc cli fastapi aiohttp otel faststream redis"
modules_of() {
    case "$1" in
        fast) echo "orjson uvloop" ;;
        spark) echo "aiorocket.spark pyspark_rocketmq" ;;
        grpc) echo "aiorocket.grpc" ;;
        cli) echo "aiorocket.cli" ;;
        fastapi) echo "aiorocket.integrations.fastapi" ;;
        aiohttp) echo "aiorocket.integrations.aiohttp" ;;
        otel) echo "aiorocket.integrations.telemetry" ;;
        faststream) echo "aiorocket.faststream" ;;
        redis) echo "redis.asyncio aiorocket.consumer.dedup_redis" ;;
    esac
}

interpreter() {
    for p in "$HOME"/.pyenv/versions/"$1".*/bin/python; do
        [ -x "$p" ] && { echo "$p"; return; }
    done
    command -v "python$1" || true
}

required() {
    case "${CI:-}" in 1|true|TRUE|yes) return 0 ;; esac
    [ "${AIOROCKET_REQUIRE_BROKER:-}" = 1 ]
}

# The unit tests in one venv; pytest's cache there keeps which failed (for `again`).
# The simulator's seeds are whole simulated runs of the same code on every Python: here
# only the first 3 of each workload (AIOROCKET_SIM_SEEDS, tests/unit/conftest.py; 3.11
# runs them all). No unit test needs minutes: one that hangs fails after 5 (not the
# suite's 15), so that a hang costs the run little. The whole run is bounded too: a
# failed test that leaves a thread running kept a 3.10 pytest from exiting after its
# summary (2026-11-29), which would have held CI to its 90-minute limit.
unit() {
    venv=$1; shift
    AIOROCKET_SIM_SEEDS="${AIOROCKET_SIM_SEEDS:-3}" timeout -k 30 1800 \
        "$venv/bin/python" -m pytest -q \
        -o "cache_dir=$venv/.pytest_cache" -o timeout=300 "$@" tests/unit \
        --ignore=tests/unit/test_docs_site.py
}

status=0
for v in $versions; do
    py=$(interpreter "$v")
    if [ -z "$py" ]; then
        echo "!!! Python $v not found (~/.pyenv/versions/$v.*, python$v)" >&2
        if required; then status=1; fi
        continue
    fi
    venv=".venv-$v"
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
    stamp="$venv/.aiorocket-installed"
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        # pip's cache (~/.cache/pip) is shared with .venv: a version's second venv
        # downloads nothing, and pyspark's sdist is built once.
        "$venv/bin/python" -m pip install -q --upgrade pip
        "$venv/bin/python" -m pip install -q -e ".[$(echo $extras | tr ' ' ,)]" --group test
        touch "$stamp"
    fi
    for part in $parts; do
        echo "== Python $v: $part" >&2
        case "$part" in
            imports)
                for extra in $extras; do
                    code="import $(modules_of "$extra" | tr ' ' ,)"
                    "$venv/bin/python" -c "$code" || {
                        echo "!!! Python $v: the $extra extra does not import" >&2; status=1; }
                done ;;
            unit)
                rm -f "$venv/.unit-status"
                rc=0; unit "$venv" "$@" || rc=$?
                echo "$rc" >"$venv/.unit-status"  # for `again`
                [ "$rc" = 0 ] || status=1 ;;
            again)
                case "$(cat "$venv/.unit-status" 2>/dev/null)" in
                    0) ;;  # nothing failed
                    "") unit "$venv" "$@" || status=1 ;;  # the run did not finish
                    *) unit "$venv" --last-failed "$@" || status=1 ;;
                esac ;;
            smoke)
                # Only the files that hold the set: collecting all of tests/integration
                # costs more than the set runs.
                # shellcheck disable=SC2046
                "$venv/bin/python" -m pytest -q -p no:cacheprovider -o timeout=300 -m smoke "$@" \
                    $(grep -l "mark.smoke" tests/integration/test_*.py) || status=1 ;;
        esac
    done
done
exit "$status"
