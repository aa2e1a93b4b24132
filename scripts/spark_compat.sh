#!/bin/sh
# The Spark connector on the oldest supported pyspark (the project's .venv has the newest):
# a second venv, .venv-spark<MAJOR><MINOR>, with the package and the dev group but pyspark
# pinned, running the Spark tests that go through each part of the Python Data Source API
# the connector uses: batch reads (all of test_batch_read.py: planning, the placeholder
# partition of an empty read, errors at load() and at the first action), a streaming read
# with admission control, AvailableNow and a restart from the checkpoint, an empty stream,
# the batch sink, and the streaming sink's commit in exactly-once mode. About 1 min; the
# rest of tests/spark exercises our own code and runs on the newest pyspark only.
#   ./scripts/spark_compat.sh               # pyspark 4.2.1
#   PYSPARK_VERSION=4.2.0 ./scripts/spark_compat.sh -x
#   ./scripts/spark_compat.sh --prepare     # only make the venv (scripts/test.sh runs this
#                                           # in the background while pytest runs)
set -eu
cd "$(dirname "$0")/.."
version="${PYSPARK_VERSION:-4.2.1}"
venv=".venv-spark$(echo "$version" | cut -d. -f1-2 | tr -d .)"
PY="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$PY" -m venv "$venv"
fi
stamp="$venv/.aiorocket-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$(cat "$stamp")" != "$version" ]; then
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -e . --group dev "pyspark==$version"
    printf '%s' "$version" >"$stamp"
fi
"$venv/bin/python" -c "import pyspark, sys; sys.exit(pyspark.__version__ != '$version')" || {
    echo "$venv does not have pyspark $version" >&2; exit 1; }
[ "${1:-}" != --prepare ] || exit 0
exec "$venv/bin/python" -m pytest -q "$@" \
    tests/spark/test_batch_read.py \
    tests/spark/test_sink.py::test_dataframe_round_trips_through_the_consumer \
    tests/spark/test_stream.py::test_rate_limited_stream_restarts_exactly_once \
    tests/spark/test_stream.py::test_stream_of_an_empty_topic_runs_empty_batches \
    tests/spark/test_stream.py::test_available_now_stops_at_what_was_there_when_it_started \
    tests/spark/test_exactly_once.py::test_replayed_batch_is_rolled_back
