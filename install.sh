#!/usr/bin/env bash
# Installs what this machine lacks to run and test the project: Debian's ZooKeeper and a headless
# JRE (for the test fixture and local clusters), promtool from Debian's prometheus package and
# amtool and Alertmanager from prometheus-alertmanager (for the tests of monitoring/), what the
# rollout tests' test-host rig needs (tests/infra/rig.py:
# debootstrap, systemd-nspawn from systemd-container, dpkg-scanpackages from dpkg-dev, ssh), and the
# Python environment in .venv, pinned by constraints.txt, with the extras the README's main job and the
# tests need: spark (pyspark), deploy (ansible-core, ansible-lint), connectors (confluent-kafka,
# psycopg, nats-py) and test. Safe to run again: it only does what is
# missing. Debian packages go in without recommends (systemd-container would otherwise pull in
# libnss-mymachines, which rewrites /etc/nsswitch.conf).
set -euo pipefail
cd "$(dirname "$0")"

need_debs=()
[ -f /usr/share/java/zookeeper.jar ] || need_debs+=(zookeeper)
command -v java >/dev/null 2>&1 || need_debs+=(default-jre-headless)
command -v promtool >/dev/null 2>&1 || need_debs+=(prometheus)
command -v amtool >/dev/null 2>&1 || need_debs+=(prometheus-alertmanager)
[ -x /usr/sbin/debootstrap ] || need_debs+=(debootstrap)
command -v systemd-nspawn >/dev/null 2>&1 || need_debs+=(systemd-container)
command -v dpkg-scanpackages >/dev/null 2>&1 || need_debs+=(dpkg-dev)
command -v ssh >/dev/null 2>&1 || need_debs+=(openssh-client)
# The servers the connectors' tests start (peer/local_servers.py): PostgreSQL with wal2json for
# its change capture, and NATS with JetStream.
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || need_debs+=(postgresql)
compgen -G "/usr/lib/postgresql/*/lib/wal2json.so" >/dev/null || need_debs+=(postgresql-15-wal2json)
command -v nats-server >/dev/null 2>&1 || need_debs+=(nats-server)
if [ ${#need_debs[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_debs[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install.sh: need root (or sudo) to install ${need_debs[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need_debs[@]}" >/dev/null
fi

python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }
find_python() {
  for candidate in python3.13 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then command -v "$candidate"; return; fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    for version in $(pyenv versions --bare | grep -E '^3\.(1[2-9])' | sort -rV); do
      candidate=$(PYENV_VERSION=$version pyenv which python 2>/dev/null) && python_ok "$candidate" && { echo "$candidate"; return; }
    done
  fi
  echo "install.sh: no Python 3.12 or newer found (install python3.12, or pyenv with 3.12)" >&2
  exit 1
}

if [ ! -x .venv/bin/python ] || ! python_ok .venv/bin/python; then
  rm -rf .venv
  "$(find_python)" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,spark,deploy,connectors]' 2>&1 \
  | grep -v "^WARNING: Location" || true
# The editable install leaves the project's own modules uncompiled. Where PYTHONDONTWRITEBYTECODE
# is set, every process started would compile them again (half a second of CPU each, and the tests
# start hundreds): compile them once here. A module edited later is recompiled as usual.
.venv/bin/python -m compileall -q -j 0 peer examples bench tests >/dev/null
.venv/bin/onyx --version
