#!/bin/sh
# Prometheus and promtool for tests/integration/test_monitoring.py (the dashboard and
# alert rules of monitoring/ against a real Prometheus): the Debian package, installed
# when missing and this runs as root with apt-get (CI); otherwise say what to install.
set -eu
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus
    exit 0
fi
echo "prometheus and promtool are needed by tests/integration/test_monitoring.py:" >&2
echo "install the 'prometheus' package (sudo apt-get install prometheus)" >&2
exit 1
