#!/usr/bin/env bash
# make bench: runs every benchmark binary once. Each prints rows "metric<TAB>measured<TAB>target";
# this aligns them into one table. Benchmarks report; they never fail on a time.
set -u
build=$1; shift
export AT_TEST_BUILD_DIR="$build"
printf '%-64s  %-22s  %s\n' "metric" "measured" "target"
printf '%-64s  %-22s  %s\n' "------" "--------" "------"
for b in "$@"; do
  "$b" | while IFS=$'\t' read -r metric value target; do
    [ -n "$metric" ] && printf '%-64s  %-22s  %s\n' "$metric" "$value" "${target:-}"
  done
done
