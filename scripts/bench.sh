#!/usr/bin/env bash
# Builds the benchmarks in release, runs every one of them, writes
# target/bench/report.md (a table per benchmark) and prints it.
#
#   scripts/bench.sh           full sizes (a few minutes)
#   scripts/bench.sh --quick   small sizes (CI; the benchmarks cannot rot)
#
# Benchmarks 1-3 (benches/turns.rs) run the bot in process on the scripted
# backend. Benchmarks 4-6 (benches/real_cli.rs) run the real Claude Code CLI
# (installed by scripts/install-claude.sh, which needs npm) against a fake
# Anthropic API, inside a loopback-only network namespace: `unshare -n`
# needs root, as the real-CLI tests do. benches/format.rs times the Telegram
# formatting splitter (split 8 MB, target under 100 ms).
#
# It fails only when a benchmark could not run or a run broke an invariant
# (an error, a timeout, lost events, a sendChatAction after TurnEnded); a
# figure that misses its target is reported, not failed.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

mode=full
flags=()
for arg in "$@"; do
  case "$arg" in
    --quick) mode=quick; flags+=(--quick) ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (use --quick)" >&2; exit 2 ;;
  esac
done

out=target/bench
mkdir -p "$out"
rm -f "$out/turns.md" "$out/real_cli.md" "$out/format.md" "$out/report.md"

started=$(date +%s)
load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
echo "bench: building (release, cargo bench profile)" >&2
# Build once and run the binaries themselves, so every benchmark of a run
# measures the same build even if the sources change meanwhile.
artifacts=$(cargo bench --locked --no-run --bench turns --bench real_cli --bench format \
  --message-format=json-render-diagnostics)
exe() {
  printf '%s\n' "$artifacts" | grep -o '"executable":"[^"]*/'"$1"'-[^"]*"' |
    sed 's/^"executable":"//; s/"$//' | tail -n 1
}
turns_exe=$(exe turns)
real_cli_exe=$(exe real_cli)
format_exe=$(exe format)
if [ -z "$turns_exe" ] || [ -z "$real_cli_exe" ] || [ -z "$format_exe" ]; then
  echo "bench: could not find the bench binaries in cargo's output" >&2
  exit 1
fi
built=$(date +%s)

status=0
run() {
  local name=$1 exe=$2
  shift 2
  local t0
  t0=$(date +%s)
  echo "bench: running $name ($mode)" >&2
  if ! "$exe" "$@" --report "$out/$name.md" >/dev/null; then
    status=1
    echo "bench: $name FAILED" >&2
    [ -s "$out/$name.md" ] || printf '### %s: FAILED\n\nSee the output of scripts/bench.sh.\n\n' "$name" >"$out/$name.md"
  fi
  echo "bench: $name took $(($(date +%s) - t0)) s" >&2
}
run turns "$turns_exe" ${flags[@]+"${flags[@]}"}
run real_cli "$real_cli_exe" ${flags[@]+"${flags[@]}"}
run format "$format_exe" ${flags[@]+"${flags[@]}"}
finished=$(date +%s)

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then commit="$commit (with uncommitted changes)"; fi
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null)
{
  echo "## Benchmark report"
  echo
  echo "- mode: **$mode** ($([ "$mode" = quick ] && echo "small sizes: figures are smoke checks, not the published ones" || echo "full sizes"))"
  echo "- commit: $commit; $(rustc --version)"
  echo "- machine: $(nproc) cores ($cpu), $mem; load average before the run: $load"
  echo "- build: release (\`cargo bench\` profile); run time $((finished - built)) s after a $((built - started)) s build"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Percentiles are nearest-rank over every sample; every ratio compares two figures of the same run."
  echo
  cat "$out/turns.md" "$out/real_cli.md" "$out/format.md"
} >"$out/report.md"
cat "$out/report.md"
echo "bench: report written to $out/report.md" >&2
if [ "$status" -ne 0 ]; then
  echo "bench: FAILED (see above)" >&2
fi
exit "$status"
