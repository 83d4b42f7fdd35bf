#!/usr/bin/env bash
# Installs what building, running and testing Headway need on a fresh Debian machine:
# the C libraries (libmicrohttpd, SQLite) and the Python tools the tests call.
# Only what is missing is installed; run as root (or with sudo available).
set -euo pipefail

apt_packages=(pkg-config libmicrohttpd-dev libsqlite3-dev)
# The tests put a real nginx in front of the daemon (deploy/nginx/headway.conf).
[ "${HEADWAY_TEST_TOOLS:-0}" = 1 ] && apt_packages+=(nginx)
[ "${HEADWAY_BENCH:-0}" = 1 ] && apt_packages+=(wrk nginx libnginx-mod-nchan util-linux)

missing=()
for package in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "Installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "${HEADWAY_TEST_TOOLS:-0}" = 1 ]; then
  if ! python3 -c "import openapi_spec_validator, yaml, pytest, httpx, httpx_sse" 2>/dev/null; then
    echo "Installing Python test tools: openapi-spec-validator, PyYAML, pytest, httpx, httpx-sse"
    python3 -m pip install --quiet --disable-pip-version-check openapi-spec-validator pyyaml pytest httpx httpx-sse
  fi
fi

if [ "${HEADWAY_BENCH:-0}" = 1 ] && ! python3 -c "import matplotlib" 2>/dev/null; then
  echo "Installing Python benchmark tools: matplotlib"
  python3 -m pip install --quiet --disable-pip-version-check matplotlib
fi
