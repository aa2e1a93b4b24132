#!/usr/bin/env bash
# The fault scenarios of tests/integration/test_fault_campaign.py at the lengths of
# issue 20: a killed broker stays down 10 s (and more while it restarts), both
# NameServers 30 s, a frozen broker (issue 30) 30 s under 1,000 sends/s. Each scenario
# prints produced / consumed / duplicates / lost.
#   scripts/fault_campaign.sh [OUTAGE_SECONDS] [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
outage="${1:-30}"
shift || true
AIOROCKET_FAULT_OUTAGE="$outage" AIOROCKET_FAULT_STALL="$outage" exec .venv/bin/python -m pytest \
    tests/integration/test_fault_campaign.py -s -q -p no:randomly "$@"
