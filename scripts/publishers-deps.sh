#!/usr/bin/env bash
# What npm run test:publishers needs beyond Node and the .NET SDK: Debian's Python packages for publishers/python
# (this machine reaches no Python index). python3-azure brings azure-servicebus 7.8.2, azure-identity and uamqp;
# python3-psycopg the PostgreSQL driver; python3-pymssql the SQL Server one; python3-pip and python3-wheel build the
# wheel. Nothing is installed when they are already there. Waits for another apt-get (the browser install) to finish.
set -euo pipefail
packages=(python3-azure python3-psycopg python3-pymssql python3-pip python3-wheel python3-setuptools)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
apt_get() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }
# apt-get update takes the lists lock, which the lock timeout does not cover: retry while another update holds it.
for _ in $(seq 1 60); do apt_get update -qq && break || sleep 5; done
apt_get install -y -qq --no-install-recommends "${missing[@]}"
/usr/bin/python3 -c "import azure.servicebus, azure.identity, psycopg, pymssql"
