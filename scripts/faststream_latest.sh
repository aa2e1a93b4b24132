#!/bin/sh
# aiorocket.faststream against the newest FastStream release, outside CI: the extra pins
# the 0.7 series (a broker subclasses FastStream's internal classes), so a new release
# may break it; this shows it early. A venv of its own (.venv-faststream-latest) gets the
# package and what its FastStream tests import, then FastStream upgraded past the pin;
# the tests run against the local RocketMQ (started by the pytest fixture when none runs).
#   ./scripts/faststream_latest.sh            # the newest release
#   ./scripts/faststream_latest.sh 0.8.0      # a given version
set -eu
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV=.venv-faststream-latest
want="${1:-}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
fi
"$VENV/bin/python" -m pip install -q -e . pytest hypothesis trio click rich httpx fastapi \
    opentelemetry-sdk prometheus-client pydantic "grpclib>=0.4.7,<0.5" "betterproto>=2.0.0b7"
if [ -n "$want" ]; then
    spec="faststream[cli,otel,prometheus]==$want"
else
    spec="faststream[cli,otel,prometheus]"
fi
# Past the extra's pin on purpose: this run is about the next release.
"$VENV/bin/python" -m pip install -q --upgrade "$spec"
version=$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('faststream'))")
echo "FastStream $version (the extra pins: $(grep -o '"faststream>=[^"]*"' pyproject.toml))"
export AIOROCKET_REQUIRE_BROKER=1
set +e
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/unit/test_faststream_extra.py \
    tests/integration/test_faststream_broker.py tests/integration/test_faststream_example.py \
    tests/integration/test_faststream_integrations.py tests/integration/test_faststream_testclient.py
status=$?
set -e
if [ "$status" -eq 0 ]; then
    echo "aiorocket.faststream works with FastStream $version"
else
    echo "aiorocket.faststream FAILS with FastStream $version (exit $status)" >&2
fi
exit "$status"
