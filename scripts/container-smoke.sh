#!/usr/bin/env bash
# Builds the container image from the Dockerfile and checks what it holds,
# without Docker and without Docker Hub: buildah (chroot isolation, no
# daemon) builds it on a Debian base made here with debootstrap, and the
# binary stage is a binary built on this machine (Debian bookworm, as the
# image). The Dockerfile's own Rust stage is the one part it does not run.
#
#   scripts/container-smoke.sh        # as root; installs buildah, debootstrap
#
# Checks: the binary runs as the non-root user and prints its version;
# check-config accepts the image's config with the token from the secret
# directory and never prints the token; bwrap and the pinned Claude Code
# CLI are there; the state directory is the user's, mode 0700.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

need=()
command -v buildah >/dev/null || need+=(buildah)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" </dev/null >/dev/null
fi
# No systemd, no cgroup manager here: build and run in a chroot.
export BUILDAH_ISOLATION=chroot
work=$(mktemp -d /var/tmp/turnstile-image.XXXXXX)
trap 'rm -rf "$work"; buildah rm --all >/dev/null 2>&1 || true' EXIT

base=localhost/turnstile-smoke-debian:bookworm-slim
if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  echo "debootstrap: a minimal Debian bookworm for the base image" >&2
  debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  # The CAs this machine adds (a registry behind a local CA): the base
  # trusts them as the host does once the image installs ca-certificates.
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    mkdir -p "$work/rootfs/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$work/rootfs/usr/local/share/ca-certificates/"
  fi
  ctr=$(buildah from scratch)
  buildah copy --quiet "$ctr" "$work/rootfs" / >/dev/null
  buildah commit --quiet "$ctr" "$base" >/dev/null
  buildah rm "$ctr" >/dev/null
  rm -rf "$work/rootfs"
fi

cargo build --release --locked --bin turnstile
mkdir -p "$work/binary/out"
install -m 0755 target/release/turnstile "$work/binary/out/turnstile"
ctr=$(buildah from scratch)
buildah copy --quiet "$ctr" "$work/binary" / >/dev/null
buildah commit --quiet "$ctr" localhost/turnstile-smoke-binary >/dev/null
buildah rm "$ctr" >/dev/null

buildah build --quiet --layers=false \
  --build-arg DEBIAN="$base" \
  --build-arg BINARY_FROM=localhost/turnstile-smoke-binary \
  -t localhost/turnstile:smoke . >/dev/null

ctr=$(buildah from localhost/turnstile:smoke)
secret=$work/secrets
mkdir -p "$secret"
token=123456:SMOKE-secret-never-printed
printf '%s\n' "$token" >"$secret/telegram-bot-token"
chmod 0644 "$secret/telegram-bot-token"
in_image() {
  buildah run --user turnstile --volume "$secret:/run/secrets:ro" "$ctr" -- "$@"
}
fail() { echo "container smoke: $*" >&2; exit 1; }

version=$(in_image turnstile --version)
# The crate's version, then the commit the build came from (or "commit
# unknown" for a build without git).
case "$version" in
  "turnstile $(cargo pkgid | sed 's/.*[#@]//') ("*")") ;;
  *) fail "turnstile --version said: $version" ;;
esac
config=$(in_image turnstile check-config --config /etc/turnstile/turnstile.toml 2>&1) \
  || fail "check-config failed: $config"
case "$config" in *"$token"*) fail "check-config printed the token" ;; esac
whoami=$(in_image id -un)
[ "$whoami" = turnstile ] || fail "runs as $whoami, not turnstile"
in_image bwrap --version >/dev/null || fail "bwrap missing"
claude=$(in_image env CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 claude --version)
pinned=$(scripts/install-claude.sh --version)
case "$claude" in "$pinned "*) ;; *) fail "claude --version said: $claude (pinned $pinned)" ;; esac
mode=$(in_image stat -c '%U %a' /var/lib/turnstile)
[ "$mode" = "turnstile 700" ] || fail "state directory is $mode"
size=$(buildah images --format '{{.Size}}' localhost/turnstile:smoke 2>/dev/null || true)
echo "container smoke: ok ($version, claude $claude, state dir $mode${size:+, image $size})"
