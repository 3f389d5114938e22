#!/usr/bin/env bash
# System packages the test suite uses beyond PyPI: a real single-node Slurm (slurmctld, slurmd,
# slurmdbd, munge, MariaDB for accounting), started by tests/support/slurm.py. Installs whichever
# are missing, with apt-get, as root. Elsewhere it says so and the Slurm tests skip (under
# CI=true they fail instead). A temporary policy-rc.d keeps the packages' scripts from starting
# system daemons: the tests start their own.
set -euo pipefail
packages=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "not installing ${missing[*]} (needs root and apt-get): the Slurm tests will skip" >&2
  exit 0
fi
created_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  created_policy=1
fi
apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
if [ -n "$created_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
