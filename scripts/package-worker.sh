#!/usr/bin/env bash
# The worker's deployment package, built one way for every path that ships it (deploy.yml, azd, the App Service
# start test): the worker package as `npm pack` publishes it (bin/ and the compiled dist/, no sources), the team's
# compiled handlers (dist-handlers/) and its production dependencies at the locked versions, without install
# scripts, development dependencies or sbinbox-dev (the local broker and embedded PostgreSQL, which App Service
# never runs): scripts/stage-worker.ts.
#
#   scripts/package-worker.sh <stage folder> [<zip file>]
#
# Needs the development dependencies installed (npm ci) for the TypeScript build. The stage folder is emptied
# first; with a zip file named, the folder is zipped into it too.
set -euo pipefail
stage="${1:?usage: scripts/package-worker.sh <stage folder> [<zip file>]}"
zip_file="${2:-}"
cd "$(dirname "$0")/.."
mkdir -p "$stage"
stage="$(cd "$stage" && pwd)"
case "$stage" in "$PWD" | "$PWD/src"* | /) echo "package-worker: refusing to empty $stage" >&2; exit 2 ;; esac
npm run --silent build
find "$stage" -mindepth 1 -delete
node scripts/stage-worker.ts "$stage"
# azd zips a service folder without node_modules unless the folder has its own ignore file; this one keeps
# everything (the folder holds nothing else).
printf '# The worker package ships its node_modules; App Service must not rebuild it.\n' >"$stage/.webappignore"
if [ -n "$zip_file" ]; then
  zip_dir="$(dirname "$zip_file")"
  mkdir -p "$zip_dir"
  zip_file="$(cd "$zip_dir" && pwd)/$(basename "$zip_file")"
  rm -f "$zip_file"
  (cd "$stage" && zip -q -r "$zip_file" .)
  echo "package-worker: $zip_file ($(du -h "$zip_file" | cut -f1))"
fi
