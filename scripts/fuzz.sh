#!/usr/bin/env bash
# Runs the cargo-fuzz targets (fuzz/fuzz_targets/, one per boundary where
# outside data comes in) for SECONDS each at low priority (nice), then
# prints a line per target: its executions, exec/s and result.
#
#   scripts/fuzz.sh SECONDS [TARGET...]    all targets when none is named
#   JOBS=2 scripts/fuzz.sh 600             two targets at a time
#   scripts/fuzz.sh --merge [TARGET...]    adds to fuzz/corpus/<target>/ the
#                                          scratch inputs that reach code it
#                                          does not (a greedy set cover)
#
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz
# --locked`). A run reads the committed corpus (fuzz/corpus/<target>/) and
# never writes it: new inputs go to fuzz/target/scratch/<target>/. A crash leaves
# its input in fuzz/artifacts/<target>/; copy it to fuzz/crashes/<target>/
# so that `cargo test --test fuzz_corpus` replays it. Logs go to
# fuzz/target/logs/<target>.log. Exits 1 when a target crashed.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/../fuzz"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

case "${1:-}" in
  ''|-h|--help) sed -n '2,17p' "$self"; exit 2 ;;
  --merge) ;;
  *[!0-9]*) echo "SECONDS must be a number: $1" >&2; exit 2 ;;
esac
mode=$1
shift
jobs=${JOBS:-1}
if (($# > 0)); then
  targets=("$@")
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

# Release with debug assertions and overflow checks; no sanitizer (the
# harnesses run safe Rust, and a panic is the finding).
flags=(--sanitizer none --release --debug-assertions)
mkdir -p target/logs
if ! nice -n 10 cargo +nightly fuzz build "${flags[@]}" >target/logs/build.log 2>&1; then
  tail -n 30 target/logs/build.log >&2
  exit 1
fi

run() {
  local target=$1 options=()
  mkdir -p "target/scratch/$target" "artifacts/$target"
  case "$target" in
    format) options+=(-max_len=16384) ;;
    config) options+=(-max_len=12288) ;;
  esac
  if [[ -f "dicts/$target.dict" ]]; then
    options+=("-dict=dicts/$target.dict")
  fi
  nice -n 10 cargo +nightly fuzz run "${flags[@]}" "$target" \
    "target/scratch/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout=30 -print_final_stats=1 \
    "${options[@]}" >"target/logs/$target.log" 2>&1
}

report() {
  local target=$1 status=$2 log="target/logs/$1.log" runs rate
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  if ((status == 0)); then
    result=ok
  else
    result="FAILED (exit $status): $(grep -m 1 -o 'Test unit written to .*' "$log" || tail -n 1 "$log")"
  fi
  printf '%-16s %12s runs %8s exec/s  %s\n' "$target" "${runs:-?}" "${rate:-?}" "$result"
}

if [[ $mode == --merge ]]; then
  for target in "${targets[@]}"; do
    before=$(find "corpus/$target" -type f | wc -l)
    mkdir -p "target/scratch/$target"
    nice -n 10 cargo +nightly fuzz run "${flags[@]}" "$target" \
      "corpus/$target" "target/scratch/$target" -- \
      -set_cover_merge=1 -use_counters=0 >"target/logs/merge-$target.log" 2>&1 || {
      tail -n 30 "target/logs/merge-$target.log" >&2
      exit 1
    }
    echo "$target: $before -> $(find "corpus/$target" -type f | wc -l) inputs"
  done
  exit 0
fi
seconds=$mode

failed=0
pending=("${targets[@]}")
declare -A running=()
while ((${#pending[@]} > 0 || ${#running[@]} > 0)); do
  while ((${#pending[@]} > 0 && ${#running[@]} < jobs)); do
    target=${pending[0]}
    pending=("${pending[@]:1}")
    run "$target" &
    running[$!]=$target
  done
  status=0
  wait -n -p done "${!running[@]}" || status=$?
  report "${running[$done]}" "$status"
  ((status == 0)) || failed=1
  unset "running[$done]"
done
exit "$failed"
