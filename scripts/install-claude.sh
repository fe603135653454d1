#!/usr/bin/env bash
# Installs the Claude Code CLI used by the real-CLI tests and benchmarks into
# .cache/claude-code (once; later runs reuse it) and prints the binary's path.
# The version is pinned here and nowhere else; `--version` prints it.
set -euo pipefail
CLAUDE_CODE_VERSION=2.1.332
# `--version` prints the pin alone (the Dockerfile installs the same one).
if [ "${1:-}" = "--version" ]; then
  echo "$CLAUDE_CODE_VERSION"
  exit 0
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$root/.cache/claude-code"
bin="$prefix/node_modules/.bin/claude"

installed() {
  # The CLI never runs with network access here: no network namespace means
  # no version check either.
  [ -x "$bin" ] && CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    unshare -n "$bin" --version 2>/dev/null | grep -q "^$CLAUDE_CODE_VERSION "
}

if ! installed; then
  mkdir -p "$prefix"
  echo "installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into $prefix" >&2
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" >&2
  # npm may skip the package's postinstall; the platform package ships the
  # native binary, so link it directly when the launcher is missing.
  if ! installed; then
    native="$prefix/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
    [ -x "$native" ] && ln -sf "$native" "$bin"
  fi
  installed || { echo "claude $CLAUDE_CODE_VERSION did not install" >&2; exit 1; }
fi
echo "$bin"
