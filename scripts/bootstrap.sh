#!/bin/sh
# Create (or refresh) the project's virtual environment in .venv: the package (editable)
# plus the development dependency groups of pyproject.toml (PEP 735), by default `dev`.
#   ./scripts/bootstrap.sh             # dev (tests, lint, types, docs)
#   ./scripts/bootstrap.sh dev bench   # and the benchmarks' extras (matplotlib, pyinstrument,
#                                      # FastStream's Kafka broker)
set -eu
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
groups="${*:-dev}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.aiorocket-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$(cat "$stamp")" != "$groups" ]; then
    # `pip install --group` needs pip >= 25.1: bring the venv's pip up to date first.
    .venv/bin/python -m pip install -q --upgrade pip
    # The distribution was called "aiorocket" before: drop a stale editable install of it.
    .venv/bin/python -m pip uninstall -q -y aiorocket >/dev/null 2>&1 || true
    set --
    for g in $groups; do set -- "$@" --group "$g"; done
    if .venv/bin/python -m pip install --help | grep -q -- '--group'; then
        .venv/bin/python -m pip install -q -e . "$@"
    else
        # pip could not be upgraded (offline mirror with an old pip): read the groups here.
        .venv/bin/python -m pip install -q -e .
        .venv/bin/python scripts/_groups.py $groups | .venv/bin/python -m pip install -q -r /dev/stdin
    fi
    printf '%s' "$groups" >"$stamp"
fi
