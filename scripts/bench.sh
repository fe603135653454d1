#!/usr/bin/env bash
# Builds the benchmarks in release, runs every one of them, writes
# target/bench/report.md (a table per benchmark) and prints it.
#
#   scripts/bench.sh           full sizes (a few minutes)
#   scripts/bench.sh --quick   small sizes (CI; the benchmarks cannot rot)
#   scripts/bench.sh [--quick] --compare BASE
#                              also runs the benchmarks of commit BASE (in a
#                              temporary worktree, built in target/compare)
#                              and fails when a figure got worse than BASE's
#                              by more than its noise band; BASE's report is
#                              kept as target/bench/report-base.md
#
# Benchmarks 1-3 (benches/turns.rs) run the bot in process on the scripted
# backend, as does the flapping soak (benches/flap.rs: Telegram down for
# 10 s every minute). Benchmarks 4-6 (benches/real_cli.rs) run the real Claude Code CLI
# (installed by scripts/install-claude.sh, which needs npm) against a fake
# Anthropic API, inside a loopback-only network namespace: `unshare -n`
# needs root, as the real-CLI tests do. benches/format.rs times the Telegram
# formatting splitter (split 8 MB, target under 100 ms).
#
# It fails when a benchmark could not run or a run broke an invariant (an
# error, a timeout, lost events or replies, a sendChatAction after
# TurnEnded, memory growth in the soak); a figure that misses its target is
# reported, not failed. Each benchmark also writes its figures to
# target/bench/figures.tsv (benches/support/figures.rs), which --compare
# sets against BASE's: a figure worse by more than its noise band fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

mode=full
flags=()
compare=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) mode=quick; flags+=(--quick) ;;
    --compare)
      [ $# -ge 2 ] || { echo "--compare needs a commit" >&2; exit 2; }
      compare=$2
      shift
      ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (use --quick, --compare BASE)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$compare" ]; then
  base_rev=$(git rev-parse --verify --quiet "$compare^{commit}") ||
    { echo "--compare: no such commit: $compare" >&2; exit 2; }
fi

out=target/bench
mkdir -p "$out"
rm -f "$out/turns.md" "$out/flap.md" "$out/real_cli.md" "$out/format.md" "$out/report.md" "$out/figures.tsv"
# Where the benchmarks write their figures (an absolute path: BASE's run
# happens in another directory).
export TURNSTILE_BENCH_FIGURES="${TURNSTILE_BENCH_FIGURES:-$PWD/$out/figures.tsv}"

started=$(date +%s)
load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
echo "bench: building (release, cargo bench profile)" >&2
# Build once and run the binaries themselves, so every benchmark of a run
# measures the same build even if the sources change meanwhile.
artifacts=$(cargo bench --locked --no-run --bench turns --bench flap --bench real_cli --bench format \
  --message-format=json-render-diagnostics)
exe() {
  printf '%s\n' "$artifacts" | grep -o '"executable":"[^"]*/'"$1"'-[^"]*"' |
    sed 's/^"executable":"//; s/"$//' | tail -n 1
}
turns_exe=$(exe turns)
flap_exe=$(exe flap)
real_cli_exe=$(exe real_cli)
format_exe=$(exe format)
if [ -z "$turns_exe" ] || [ -z "$flap_exe" ] || [ -z "$real_cli_exe" ] || [ -z "$format_exe" ]; then
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
run flap "$flap_exe" ${flags[@]+"${flags[@]}"}
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
  cat "$out/turns.md" "$out/flap.md" "$out/real_cli.md" "$out/format.md"
} >"$out/report.md"
cat "$out/report.md"
echo "bench: report written to $out/report.md" >&2
# Each figure is one key of --compare: a name written twice would be set
# against the other's value.
dups=$(cut -f1,2 "$TURNSTILE_BENCH_FIGURES" 2>/dev/null | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "bench: figure names written more than once (each must be unique): $dups" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "bench: FAILED (see above)" >&2
fi

if [ -n "$compare" ]; then
  root=$PWD
  head_figures=$TURNSTILE_BENCH_FIGURES
  base_figures=$root/$out/figures-base.tsv
  rm -f "$base_figures"
  base_tree=$(mktemp -d)
  trap 'git -C "$root" worktree remove --force "$base_tree" >/dev/null 2>&1 || rm -rf "$base_tree"' EXIT
  git worktree add --detach --quiet "$base_tree" "$base_rev"
  echo "bench: running the benchmarks of $compare ($(git rev-parse --short "$base_rev")) for comparison" >&2
  # BASE's own invariants are not this run's business: only its figures.
  (cd "$base_tree" && CARGO_TARGET_DIR="$root/target/compare" TURNSTILE_BENCH_FIGURES="$base_figures" \
    scripts/bench.sh ${flags[@]+"${flags[@]}"} >/dev/null) || true
  # BASE's own report, for the figures it has but writes no line for.
  cp "$base_tree/target/bench/report.md" "$out/report-base.md" 2>/dev/null || true
  if [ ! -s "$base_figures" ]; then
    echo "bench: $compare wrote no figures (it predates --compare): nothing to compare" >&2
    exit 2
  fi
  {
    echo
    echo "## Comparison with $compare ($(git rev-parse --short "$base_rev"))"
    echo
    echo "A figure is worse when it moved the wrong way by more than its noise band (a share of BASE's value, at least the floor)."
    echo
    echo "| benchmark | figure | $compare | this commit | change | noise band | verdict |"
    echo "|---|---|---|---|---|---|---|"
  } >"$out/compare.md"
  regressions=$(awk -F '\t' -v out="$out/compare.md" '
    FNR == NR { base[$1 FS $2] = $3; next }
    {
      key = $1 FS $2
      if (!(key in base)) next
      b = base[key]; h = $3
      worse = ($5 == "lower") ? h - b : b - h
      band = $6 / 100 * (b < 0 ? -b : b)
      if (band < $7) band = $7
      change = (b != 0) ? sprintf("%+.1f %%", 100 * (h - b) / (b < 0 ? -b : b)) : "–"
      verdict = (worse > band) ? "**worse**" : "ok"
      if (worse > band) n++
      printf "| %s | %s | %.4g %s | %.4g %s | %s | %s %% (at least %s %s) | %s |\n", $1, $2, b, $4, h, $4, change, $6, $7, $4, verdict >> out
    }
    END { print n + 0 }' "$base_figures" "$head_figures")
  cat "$out/compare.md"
  if [ "$regressions" -gt 0 ]; then
    echo "bench: $regressions figure(s) worse than $compare beyond their noise band" >&2
    status=1
  fi
fi
exit "$status"
