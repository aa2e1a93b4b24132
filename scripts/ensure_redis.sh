#!/bin/sh
# redis-server for tests/integration/test_dedup_redis.py (RedisDedupStore against a real
# Redis, each test starting its own on a free loopback port): the Debian package,
# installed when missing and this runs as root with apt-get (CI); otherwise say what to
# install. The package's own service is not needed (and not started where systemd is not).
set -eu
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server
    exit 0
fi
echo "redis-server is needed by tests/integration/test_dedup_redis.py:" >&2
echo "install the 'redis-server' package (sudo apt-get install redis-server)" >&2
exit 1
