#!/usr/bin/env bash
# The real reader as a gate: builds tests/compat (atcompat) against each TraceEvent version and runs
# it over the traces the integration tests kept (AT_KEEP_TRACES, tests/lib/at_testlib.c), the demo's
# trace and the runtime-written samples of tests/data/nettrace-samples (read and converted only);
# then dotnet-trace convert over some of them (convert.sh) and test_actpath_live.
#   run.sh BUILD KEEP-DIR [TEST-BINARY...]
# Test binaries given are run first with AT_KEEP_TRACES=KEEP-DIR (make check-traceevent); make check
# passes none: its own run of every test filled KEEP-DIR. Prints each version's FAIL lines and closes
# with "N passed, N failed" over all files and versions (every file's line in BUILD/compat/).
# Without dotnet on PATH it prints one line and counts nothing, unless AT_TRACEEVENT_REQUIRED=1 (CI).
set -u
build=$(cd "$1" && pwd); keep=$2; shift 2
src=$(cd "$(dirname "$0")/../.." && pwd)
versions=${TRACEEVENT_VERSIONS:-3.1.21 4.0.0}
if ! command -v dotnet >/dev/null 2>&1; then
  echo "check-traceevent: dotnet is not on PATH: the TraceEvent checks did not run (install the .NET SDK)"
  if [ "${AT_TRACEEVENT_REQUIRED:-0}" = 1 ]; then echo "0 passed, 1 failed"; exit 1; fi
  exit 0
fi
start=$(date +%s)
passed=0; failed=0
mkdir -p "$build/compat" "$keep"
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 DOTNET_SKIP_FIRST_TIME_EXPERIENCE=1
for v in $versions; do
  if ! dotnet build "$src/tests/compat/AtCompat.csproj" -c Release -nologo -v q -p:TraceEventVersion="$v" \
       -p:AtBuildDir="$build/compat" >"$build/compat/build-$v.log" 2>&1; then
    echo "check-traceevent: building the checker against TraceEvent $v failed; see $build/compat/build-$v.log"
    tail -n 20 "$build/compat/build-$v.log"
    failed=$((failed + 1))
  fi
done
for t in "$@"; do
  name=$(basename "$t")
  if AT_KEEP_TRACES="$keep" AT_TEST_BUILD_DIR="$build" "$t" >"$build/compat/$name.log" 2>&1; then
    echo "check-traceevent: $name ran: $(grep -E '^[0-9]+%: Checks' "$build/compat/$name.log" | tail -n 1)"
  else
    echo "check-traceevent: $name failed (its traces are checked all the same); see $build/compat/$name.log"
  fi
done
# the demo's trace, made as tests/demo/run.sh makes it
demo="$build/compat/demo.nettrace"
rm -f "$demo"
if [ -x "$build/fixtures/demo_server" ]; then
  "$build/acttrace" run -c "$src/tests/demo/demo.conf" -o "$demo" -- "$build/fixtures/demo_server" 200 4 8 \
    >"$build/compat/demo.log" 2>&1 || echo "check-traceevent: the demo failed; see $build/compat/demo.log"
fi
files=("$keep")
[ -f "$demo" ] && files+=("$demo")
for v in $versions; do
  bin="$build/compat/te-$v/bin/Release/net10.0/atcompat"
  [ -x "$bin" ] || continue
  log="$build/compat/check-$v.log"
  "$bin" --acttrace "$build/acttrace" "${files[@]}" --read-only "$src/tests/data/nettrace-samples" >"$log" 2>&1
  grep -E '^FAIL ' "$log" | head -n 40
  line=$(tail -n 1 "$log")
  if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1])); failed=$((failed + BASH_REMATCH[2]))
    echo "check-traceevent: $(tail -n 2 "$log" | head -n 1); $line"
  else
    echo "check-traceevent: the checker for TraceEvent $v ended without its summary; see $log"
    tail -n 10 "$log"
    failed=$((failed + 1))
  fi
done
# dotnet-trace convert (Speedscope, Chromium) over the largest trace of each test, the demo's and the
# runtime's samples (convert.sh), and the activity ids of a live runtime (test_actpath_live)
conv=$(bash "$src/tests/compat/convert.sh" "$build" "${files[@]}" "$src/tests/data/nettrace-samples" 2>&1)
grep -E '^FAIL ' <<<"$conv" | head -n 20
line=$(tail -n 1 <<<"$conv")
if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
  passed=$((passed + BASH_REMATCH[1])); failed=$((failed + BASH_REMATCH[2]))
  echo "check-traceevent: $(tail -n 2 <<<"$conv" | head -n 1); $line"
else
  echo "check-traceevent: dotnet-trace convert ended without its summary:"; tail -n 5 <<<"$conv"; failed=$((failed + 1))
fi
# (make check runs test_actpath_live with the other unit tests; make check-traceevent runs it here)
if [ $# -gt 0 ] && [ -x "$build/tests/test_actpath_live" ]; then
  if AT_TEST_BUILD_DIR="$build" AT_TRACEEVENT_REQUIRED=1 "$build/tests/test_actpath_live" >"$build/compat/actpath_live.log" 2>&1; then
    passed=$((passed + 1)); echo "check-traceevent: $(grep '^test_actpath_live:' "$build/compat/actpath_live.log")"
  else
    failed=$((failed + 1)); echo "check-traceevent: activity ids of a live runtime differ; see $build/compat/actpath_live.log"
  fi
fi
echo "check-traceevent: $(( $(date +%s) - start )) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
