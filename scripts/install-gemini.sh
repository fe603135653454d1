#!/usr/bin/env bash
# Installs Gemini CLI, the ACP agent of the real-CLI tests (tests/real_gemini.rs),
# into .cache/gemini-cli (once; later runs reuse it) and prints the binary's
# path. The version is pinned here and nowhere else; `--version` prints it.
set -euo pipefail
GEMINI_CLI_VERSION=0.61.0
if [ "${1:-}" = "--version" ]; then
  echo "$GEMINI_CLI_VERSION"
  exit 0
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$root/.cache/gemini-cli"
bin="$prefix/node_modules/.bin/gemini"

installed() {
  [ -x "$bin" ] && [ "$(cat "$prefix/node_modules/@google/gemini-cli/package.json" 2>/dev/null \
    | sed -n 's/^  "version": "\(.*\)",$/\1/p')" = "$GEMINI_CLI_VERSION" ]
}

if ! installed; then
  mkdir -p "$prefix"
  echo "installing @google/gemini-cli@$GEMINI_CLI_VERSION into $prefix" >&2
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
    "@google/gemini-cli@$GEMINI_CLI_VERSION" >&2
  installed || { echo "gemini $GEMINI_CLI_VERSION did not install" >&2; exit 1; }
fi
echo "$bin"
