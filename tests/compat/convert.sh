#!/usr/bin/env bash
# dotnet-trace convert over our traces: --format Speedscope and --format Chromium must succeed on each
# file, write JSON that parses and whose samples point at frames that exist, and every activity frame
# the converter writes must name an activity `acttrace tree` lists for that file.
#   convert.sh BUILD FILE-OR-DIR...
# A folder gives the largest trace of each test (CONVERT_PER_TEST traces; the test is the file name up
# to the first '-'): fork/exec chains, hooks with stacks, rotated and circular segments... The tool is
# installed from NuGet into BUILD/compat/dotnet-trace (DOTNET_TRACE_VERSION). Closes with
# "N passed, N failed", one check per file and format.
#
# What the converter keeps (dotnet/diagnostics TraceFileFormatConverter.ConvertFromNetTrace): it runs
# TraceEvent's SampleProfilerThreadTimeComputer with IncludeEventSourceEvents = false, so its output
# holds samples only (SampleProfiler ThreadSample, GC allocation ticks, TPL task events); activities
# appear as "Activity <Name>(<path>)" frames above the samples taken inside them. acttrace writes
# samples when sampling is on (ACTTRACE_SAMPLE_HZ): then every activity that holds a sample on a
# thread where it started must be such a frame, with its path (but for the thread's last sample,
# which the converter never writes: it weighs each sample by the time to the thread's next one); a
# trace without samples converts to no activity frame. A sample on a thread the activity reached by
# a hand-off counts too when the hand-off is a task there (TraceEvent's StartStopActivityComputer
# gives a thread only the activities started on it or brought by a TPL task, never by an event's
# ActivityId; the shim writes TaskScheduled, TaskExecute Start and Stop beside a Send and its
# Receive): a sample between a TaskStarted and its TaskCompleted, in the activity of the Receive
# that opened the task (docs/perfview.md).
set -u
build=$(cd "$1" && pwd); shift
version=${DOTNET_TRACE_VERSION:-10.0.750501}
tooldir="$build/compat/dotnet-trace"
out="$build/compat/convert"
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 DOTNET_SKIP_FIRST_TIME_EXPERIENCE=1
if ! command -v dotnet >/dev/null 2>&1 || ! command -v python3 >/dev/null 2>&1; then
  echo "convert: dotnet or python3 is not on PATH: dotnet-trace convert was not checked"
  echo "0 passed, 1 failed"; exit 1
fi
if ! "$tooldir/dotnet-trace" --version 2>/dev/null | grep -q "^${version%%.*}"; then
  rm -rf "$tooldir"
  if ! dotnet tool install dotnet-trace --tool-path "$tooldir" --version "$version" >"$build/compat/dotnet-trace-install.log" 2>&1; then
    echo "convert: installing dotnet-trace $version failed; see $build/compat/dotnet-trace-install.log"
    echo "0 passed, 1 failed"; exit 1
  fi
fi
rm -rf "$out" && mkdir -p "$out"
files=()
for a in "$@"; do
  if [ -d "$a" ]; then
    while IFS= read -r f; do files+=("$f"); done < <(
      for t in $(ls "$a" | grep '\.nettrace$' | sed 's/-.*//; s/\.nettrace$//' | sort -u); do
        ls -S "$a"/"$t"*.nettrace | head -n "${CONVERT_PER_TEST:-1}"
      done | sort -u)
  elif [ -f "$a" ]; then
    files+=("$a")
  fi
done
passed=0; failed=0
for f in "${files[@]}"; do
  base=$(basename "$f" .nettrace); base=${base//./_} # the tool replaces what follows the last dot
  "$build/acttrace" tree "$f" >"$out/$base.tree" 2>&1
  "$build/acttrace" dump --no-stacks "$f" >"$out/$base.dump" 2>&1
  for fmt in Speedscope Chromium; do
    log="$out/$base.$fmt.log"
    json="$out/$base.${fmt,,}.json" # the tool puts its own extension on -o
    "$tooldir/dotnet-trace" convert "$f" --format "$fmt" -o "$out/$base" >"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q "Conversion complete" "$log" || grep -qE "Exception|potentially broken" "$log" || [ ! -s "$json" ]; then
      echo "FAIL convert $fmt $f: exit $rc; see $log"; failed=$((failed + 1)); continue
    fi
    if msg=$(python3 - "$fmt" "$json" "$out/$base.tree" "$out/$base.dump" 2>&1 <<'EOF'
import json, re, sys
fmt, path, tree, dump = sys.argv[1:]
# The converter logs each sample's stack when the thread's next sample arrives (its weight is the time
# between them), so a thread's last sample is never written: it counts only if it is not the last.
per_thread = {}
started_on = set() # (thread, activity path) of every Start
for line in open(dump, errors="replace"):
    m = re.search(r'^\s*([0-9.]+) ms\s+tid (\d+)\s+Microsoft-DotNETCore-SampleProfiler/.* act=\S+ (//[0-9/]+) ', line)
    if m: per_thread.setdefault(m.group(2), []).append((float(m.group(1)), 1, m.group(3)))
    m = re.search(r'^\s*([0-9.]+) ms\s+tid (\d+)\s+acttrace-flow/TransferReceive\s+Receive act=\S+ (//[0-9/]+) ', line)
    if m: per_thread.setdefault(m.group(2), []).append((float(m.group(1)), 0, m.group(3)))
    m = re.search(r'^\s*([0-9.]+) ms\s+tid (\d+)\s+System.Threading.Tasks.TplEventSource/Task(Started|Completed) ', line)
    if m: per_thread.setdefault(m.group(2), []).append((float(m.group(1)), 0, m.group(3)))
    m = re.search(r'^\s*[0-9.]+ ms\s+tid (\d+)\s+\S+Start\s+Start act=\S+ (//[0-9/]+) ', line)
    if m: started_on.add((m.group(1), m.group(2)))
sampled = set()
for tid, events in per_thread.items():
    events.sort(key=lambda e: e[0])
    last = [i for i, e in enumerate(events) if e[1] == 1][-1:]
    received, tasks = None, []
    for i, (_, sample, what) in enumerate(events):
        if what == "Started": tasks.append(received)
        elif what == "Completed": tasks = tasks[:-1]
        elif not sample: received = what
        elif i not in last and ((tid, what) in started_on or (tasks and tasks[-1] == what)):
            sampled.add(what)
doc = json.load(open(path))
names = set()
for line in open(tree):
    m = re.match(r'\s*(\S+)\s+//', line)
    if m: names.add(m.group(1))
if fmt == "Speedscope":
    frames = [f["name"] for f in doc["shared"]["frames"]]
    for p in doc["profiles"]:
        for e in p.get("events", []):
            assert 0 <= e["frame"] < len(frames), "event frame %r out of range" % e["frame"]
        for s in p.get("samples", []):
            assert all(0 <= i < len(frames) for i in s), "sample frame out of range"
    count = sum(len(p.get("events", p.get("samples", []))) for p in doc["profiles"])
else:
    sf = doc["stackFrames"]
    frames = [v["name"] for v in sf.values()]
    for e in doc["traceEvents"]:
        if "sf" in e: assert str(e["sf"]) in sf, "event frame %r missing" % e["sf"]
    count = len(doc["traceEvents"])
acts = [n for n in frames if n.startswith("Activity ")]
paths = set()
for a in acts:
    task = a[len("Activity "):].split("(")[0]
    assert task in names, "activity frame %r names no activity of acttrace tree" % a
    m = re.search(r'\(/#\d+((?:/\d+)+)/\)$', a)
    if m: paths.add("/" + m.group(1))
missing = sorted(sampled - paths)
assert not missing, "%d activities hold samples but are no activity frame: %s" % (len(missing), " ".join(missing[:5]))
print("%d frames, %d samples/events, %d activity frames (%d activities with samples); acttrace lists %d activity names" % (len(frames), count, len(acts), len(sampled), len(names)))
EOF
    ); then
      passed=$((passed + 1)); echo "ok convert $fmt $base: $msg" >>"$out/summary.log"
    else
      echo "FAIL convert $fmt $f: ${msg##*$'\n'}"; failed=$((failed + 1))
    fi
  done
done
echo "convert: ${#files[@]} files with dotnet-trace $version (Speedscope and Chromium); details in $out/summary.log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
