#!/bin/sh
# The demo: a local RocketMQ (2 brokers, downloaded from Maven Central on first use),
# 20,000 messages produced with auto-batching, then consumed back.
# A broker the demo started is stopped when it ends; one that already ran is left running.
# Keep the demo's broker running with AIOROCKET_KEEP_BROKER=1.
set -eu
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
broker() { .venv/bin/python -m aiorocket.testing.broker "$@"; }
STOP_HINT="stop it with: .venv/bin/python -m aiorocket.testing.broker stop"
if broker status >/dev/null 2>&1; then
    echo "using the local RocketMQ that already runs (left running; $STOP_HINT)"
    broker start
elif [ -n "${AIOROCKET_KEEP_BROKER:-}" ]; then
    broker start
    echo "AIOROCKET_KEEP_BROKER is set: the local RocketMQ stays up; $STOP_HINT"
else
    cleanup() {
        echo "stopping the local RocketMQ the demo started"
        broker stop
    }
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    broker start
fi
.venv/bin/python examples/demo.py "$@"
