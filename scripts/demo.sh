#!/bin/sh
# Start the local RocketMQ (downloaded from Maven Central on first use) and run the demo.
set -eu
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
.venv/bin/python -m aiorocket.testing.broker start
exec .venv/bin/python examples/demo.py "$@"
