#!/usr/bin/env bash
# Installs what the test suite needs and is missing: redis-server (with
# redis-cli, for the local Cluster test), PostgreSQL server binaries, and
# Node.js with npm (the node-redlock interoperability test), and etcd with
# etcdctl (the etcdlock tests' cluster and interop test). Debian/Ubuntu.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
# Debian starts the packaged services; the tests start their own servers.
if command -v service >/dev/null 2>&1; then
  $sudo service redis-server stop >/dev/null 2>&1 || true
  $sudo service postgresql stop >/dev/null 2>&1 || true
  $sudo service etcd stop >/dev/null 2>&1 || true
fi
