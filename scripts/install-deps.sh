#!/usr/bin/env bash
# Installs what building, running and testing Headway need on a fresh Debian machine:
# the C libraries (libmicrohttpd, SQLite, GnuTLS, libcurl, libpq; jemalloc, which release builds
# of the daemon allocate with), and the Python tools the tests and benchmarks
# call, in a virtual environment under .build/venv (Debian 12 and Ubuntu 24.04 refuse pip
# installs into the system Python, PEP 668). Only what is missing is installed; run as
# root (or with sudo available).
set -euo pipefail

apt_packages=(pkg-config libmicrohttpd-dev libsqlite3-dev libgnutls28-dev libcurl4-openssl-dev libpq-dev libjemalloc-dev)
# The tests put a real nginx in front of the daemon (deploy/nginx/headway.conf), drive
# a real headless Chromium at it (Selenium uses Debian's chromedriver, no download), and
# make certificates (openssl) and HTTPS requests (curl) for the TLS tests, and drive the
# headway command in real terminals and shells (tmux, zsh, fish), damage databases (sqlite3),
# check metrics and alert rules (promtool, from prometheus) and the systemd unit (systemd-analyze),
# and put the database on a small filesystem that fills up or turns read-only (mount,
# findmnt from util-linux; mkfs.ext4, e2fsck from e2fsprogs), and start a private PostgreSQL
# server (postgresql: initdb, pg_ctl, psql; run as its postgres user through runuser).
# The dashboard's pure modules are unit-tested by Node's own runner (nodejs: `node --test`),
# and its Korean screenshots need a CJK font (fonts-noto-cjk), else Hangul draws as boxes.
[ "${HEADWAY_TEST_TOOLS:-0}" = 1 ] && apt_packages+=(nginx python3-venv chromium chromium-driver openssl curl tmux zsh fish sqlite3 prometheus systemd util-linux e2fsprogs postgresql nodejs fonts-noto-cjk)
# The benchmarks also run Redis beside the daemon (redis-server) with a load client in C
# (bench/redis-progress.c) and event-stream subscribers in C (bench/sse-subscribers.c), compiled by gcc.
[ "${HEADWAY_BENCH:-0}" = 1 ] && apt_packages+=(wrk nginx libnginx-mod-nchan util-linux python3-venv openssl sqlite3 postgresql redis-server gcc libc6-dev)

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

cd "$(dirname "$0")/.."
venv=.build/venv
python_tools=()
# tqdm and celery: the Python client's tqdm drop-in and its Celery example (clients/python);
# aiosmtpd: a real SMTP server the e-mail webhooks deliver to (Tests/integration/test_webhook_formats.py).
[ "${HEADWAY_TEST_TOOLS:-0}" = 1 ] && python_tools+=(openapi-spec-validator pyyaml pytest httpx httpx-sse selenium schemathesis tqdm celery aiosmtpd)
# bullmq: BullMQ's own scripts and Queue.add, for the Redis comparison; tqdm: the Python
# client's overhead beside plain tqdm.
[ "${HEADWAY_BENCH:-0}" = 1 ] && python_tools+=(matplotlib bullmq tqdm)
if [ ${#python_tools[@]} -gt 0 ]; then
  # A venv without a working pip (an interrupted creation) is made again.
  if ! "$venv/bin/python3" -m pip --version >/dev/null 2>&1; then
    echo "Creating the Python virtual environment $venv"
    rm -rf "$venv"
    mkdir -p .build
    python3 -m venv "$venv" || {
      echo "Cannot create $venv: install Python's venv module (Debian: apt-get install python3-venv)" >&2
      exit 1
    }
  fi
  # Installed once: pip checks what is there and leaves it (a stamp file saves its start-up).
  stamp="$venv/.installed-$(printf '%s\n' "${python_tools[@]}" | sort | tr '\n' '+')"
  if [ ! -e "$stamp" ]; then
    echo "Installing Python tools into $venv: ${python_tools[*]}"
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check "${python_tools[@]}"
    touch "$stamp"
  fi
fi

# Airflow, for the Python client's Airflow example (Tests/integration/test_python_client_examples.py):
# a venv of its own, since Airflow pins its many dependencies to versions of its own.
airflow_venv=.build/airflow-venv
if [ "${HEADWAY_TEST_TOOLS:-0}" = 1 ] && [ ! -e "$airflow_venv/.installed-apache-airflow-3.3.2" ]; then
  echo "Installing Airflow into $airflow_venv (a few minutes, once)"
  rm -rf "$airflow_venv"
  python3 -m venv "$airflow_venv"
  "$airflow_venv/bin/python3" -m pip install --quiet --disable-pip-version-check "apache-airflow==3.3.2"
  touch "$airflow_venv/.installed-apache-airflow-3.3.2"
fi
