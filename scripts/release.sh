#!/usr/bin/env bash
# Builds a release binary and a tarball to hand out, with its SHA-256
# checksum: target/dist/turnstile-<version>-<target>.tar.gz (the binary,
# README.md, CHANGELOG.md, LICENSE, config.example.toml and
# contrib/turnstile.service) and the same name + .sha256, which
# `sha256sum -c` checks. The binary's --version names the commit it was
# built from. A build of a tree with uncommitted changes is refused
# (its --version would say "dirty") unless ALLOW_DIRTY=1.
#
# Usage: scripts/release.sh [TARGET]   (default: the host's target triple)
# The target's standard library must be installed (`rustup target add`);
# a static binary needs a musl target: x86_64-unknown-linux-musl.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${1:-$(rustc -vV | sed -n 's/^host: //p')}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && [ "${ALLOW_DIRTY:-}" != 1 ]; then
  echo "release.sh: the tree has uncommitted changes; commit them (or set ALLOW_DIRTY=1)" >&2
  exit 1
fi
cargo build --locked --release --target "$target" --bin turnstile
binary="target/$target/release/turnstile"
name="turnstile-$version-$target"
dist="target/dist"
stage="$dist/$name"
rm -rf "$stage"
mkdir -p "$stage"
cp "$binary" README.md CHANGELOG.md LICENSE config.example.toml contrib/turnstile.service "$stage/"
tar -C "$dist" --owner=0 --group=0 --numeric-owner -czf "$dist/$name.tar.gz" "$name"
rm -rf "$stage"
(cd "$dist" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
"$binary" --version
echo "$root/$dist/$name.tar.gz"
cat "$dist/$name.tar.gz.sha256"
