#!/usr/bin/env bash
# Builds the libFuzzer harnesses under Fuzz/ and runs each target in turn.
#
#   scripts/fuzz.sh [SECONDS]     each target for SECONDS (default 60), new inputs kept
#   scripts/fuzz.sh --runs COUNT  each target for COUNT inputs with seed 1: the short,
#                                 repeatable run of `make fuzz` (and so of `make test`)
#
# HeadwayCore is compiled once with coverage and AddressSanitizer into a static library;
# each harness (Fuzz/<target>/*.swift, with the checks in Fuzz/Support) links it and sees
# only its public API. Inputs start from the committed seeds in Fuzz/corpus/<target>; what
# a timed run finds is kept in .build/fuzz/corpus/<target> for the next one (a counted run
# starts afresh from the seeds each time, so it is repeatable), and a failing input goes to
# .build/fuzz/artifacts/. Each target's output is kept in .build/fuzz/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(json requests query last-event-id credentials)
swiftc=${SWIFTC:-swiftc}
out=.build/fuzz
flags=(-sanitize=fuzzer,address -parse-as-library -O -use-ld=lld -swift-version 6)
if [[ "${CI:-}" == true || "${CI:-}" == 1 ]]; then flags+=(-warnings-as-errors); fi

usage() { echo "usage: scripts/fuzz.sh [SECONDS] | --runs COUNT" >&2; exit 64; }
limit=(-max_total_time=60)
found=corpus
case "${1:-}" in
  "") ;;
  --runs) [[ "${2:-}" =~ ^[0-9]+$ ]] || usage; limit=(-runs="$2" -seed=1); found=short-run ;;
  *) [[ "$1" =~ ^[0-9]+$ ]] || usage; limit=(-max_total_time="$1") ;;
esac

# Rebuilds `output` from `inputs` when any of them is newer (or it is missing).
stale() {
  local output=$1; shift
  [ ! -e "$output" ] || [ -n "$(find "$@" -newer "$output" -print -quit)" ]
}

# A failing property aborts: libFuzzer's own handler must see it (saving the input and
# exiting at once); the Swift runtime's backtracer, on by default, stalls under ASan.
export SWIFT_BACKTRACE=enable=no
# Swift seeds its hashing at random in each process, which changes the paths a dictionary
# takes: fixed, a counted run with seed 1 repeats itself (to within a few features).
export SWIFT_DETERMINISTIC_HASHING=1

mkdir -p "$out/artifacts"
core=("$PWD"/Sources/HeadwayCore/*.swift)
if stale "$out/libHeadwayCore.a" "${core[@]}"; then
  echo "fuzz: building HeadwayCore with coverage and AddressSanitizer"
  # Built inside $out, where the library and its module (for the harnesses' import) land.
  (cd "$out" && "$swiftc" "${flags[@]}" -package-name Headway -module-name HeadwayCore -emit-module -emit-library -static "${core[@]}")
fi

for target in "${targets[@]}"; do
  harness=(Fuzz/Support/*.swift Fuzz/"$target"/*.swift)
  if stale "$out/$target" "${harness[@]}" "$out/libHeadwayCore.a"; then
    echo "fuzz: building $target"
    "$swiftc" "${flags[@]}" -package-name Headway -module-name "Fuzz_${target//-/_}" -I "$out" -L "$out" -lHeadwayCore \
      "${harness[@]}" -o "$out/$target"
  fi
done

for target in "${targets[@]}"; do
  [ "$found" = corpus ] || rm -rf "${out:?}/$found/$target"
  mkdir -p "$out/$found/$target"
  options=("${limit[@]}" -artifact_prefix="$out/artifacts/$target-" -print_final_stats=1)
  [ -e "Fuzz/$target.dict" ] && options+=(-dict="Fuzz/$target.dict")
  echo "fuzz: $target ${limit[*]}"
  if ! "$out/$target" "${options[@]}" "$out/$found/$target" "Fuzz/corpus/$target" > "$out/$target.log" 2>&1; then
    tail -n 60 "$out/$target.log" >&2
    echo "fuzz: $target failed (whole output: $out/$target.log); the input is in $out/artifacts/" >&2
    exit 1
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$out/$target.log" | sed "s/^/  /"
done
