#!/usr/bin/env bash
# Runs every Check test binary given, prints each one's own summary line, and closes with the
# totals as "N passed, N failed". Exit status is non-zero if any check failed or a binary died.
set -u
build=$1; shift
passed=0; failed=0; broken=()
export AT_TEST_BUILD_DIR="$build"
for t in "$@"; do
  name=$(basename "$t")
  log="$build/tests/$name.log"
  start=$(date +%s)
  "$t" >"$log" 2>&1; rc=$?
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
[ ${#broken[@]} -gt 0 ] && echo "failing: ${broken[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
