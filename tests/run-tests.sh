#!/usr/bin/env bash
# Runs every Check test binary given, prints each one's own summary line, and closes with the
# totals as "N passed, N failed". Exit status is non-zero if any check failed or a binary died.
# A libFuzzer target (fuzz_*) counts as one check: it runs AT_FUZZ_SECONDS (default 10) over its
# seeds (tests/fuzz/seeds/<name>) and its corpus in the build folder, and passes when it finds nothing.
set -u
build=$1; shift
passed=0; failed=0; broken=()
export AT_TEST_BUILD_DIR="$build"
seeds=$(cd "$(dirname "$0")" && pwd)/fuzz/seeds
run_fuzz() { # name binary log
  local corpus="$build/fuzz/corpus-$1" rc
  mkdir -p "$corpus" "$build/fuzz/crash-$1"
  "$2" -max_total_time="${AT_FUZZ_SECONDS:-10}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz/crash-$1/" "$corpus" "$seeds/$1" >"$3" 2>&1
  rc=$?
  local runs; runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$3" | grep -Eo '[0-9]+$')
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); printf '%-34s fuzz: %s runs, no finding (%ss)\n' "$1" "${runs:-?}" "${AT_FUZZ_SECONDS:-10}"
  else
    failed=$((failed + 1)); broken+=("$1")
    echo "$1: fuzz finding (exit $rc); inputs in $build/fuzz/crash-$1/, log $3"
    grep -E 'ERROR|runtime error|SUMMARY|^    #[0-9]' "$3" | head -n 30
  fi
}
mkdir -p "$build/tests"
for t in "$@"; do
  name=$(basename "$t")
  log="$build/tests/$name.log"
  case "$name" in fuzz_*) run_fuzz "$name" "$t" "$log"; continue ;; esac
  start=$(date +%s)
  # traces are kept (AT_KEEP_TRACES) from the tests that trace real programs: AT_KEEP_TRACES_OF
  # names them; the unit tests' files are made-up inputs (injected numbers, hand-set clocks)
  keep=
  [[ " ${AT_KEEP_TRACES_OF:-} " == *" $name "* ]] && keep=${AT_KEEP_TRACES:-}
  AT_KEEP_TRACES=$keep "$t" >"$log" 2>&1; rc=$?
  secs=$(( $(date +%s) - start ))
  line=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$log" | tail -n 1)
  if [ -z "$line" ]; then
    echo "$name: no Check summary (exit $rc); see $log"; tail -n 20 "$log"
    failed=$((failed + 1)); broken+=("$name"); continue
  fi
  n=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
  f=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
  e=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
  passed=$((passed + n - f - e)); failed=$((failed + f + e))
  printf '%-34s %s (%ss)\n' "$name" "$line" "$secs"
  if [ "$f" != 0 ] || [ "$e" != 0 ] || [ $rc -ne 0 ]; then
    grep -E ':[EF]:' "$log" | head -n 30
    broken+=("$name")
    [ "$f" = 0 ] && [ "$e" = 0 ] && failed=$((failed + 1))
  fi
done
# AT_KEEP_TRACES (make check): the traces the tests kept, read by TraceEvent itself (tests/compat)
if [ -n "${AT_KEEP_TRACES:-}" ]; then
  te_log="$build/compat/run.log"
  mkdir -p "$build/compat"
  bash "$(dirname "$0")/compat/run.sh" "$build" "$AT_KEEP_TRACES" >"$te_log" 2>&1
  grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$te_log"
  te=$(tail -n 1 "$te_log")
  if [[ $te =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1])); failed=$((failed + BASH_REMATCH[2]))
    [ "${BASH_REMATCH[2]}" != 0 ] && broken+=("traceevent")
  fi
fi
[ ${#broken[@]} -gt 0 ] && echo "failing: ${broken[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
