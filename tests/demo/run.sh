#!/usr/bin/env bash
# make demo: trace an unmodified-looking server under the shim, then read the trace back.
# demo_server (tests/fixtures/demo_server.c) accepts on its main thread and hands connections to a
# worker pool through its own queue; client threads drive 200 requests over loopback. Then the
# analysis commands answer: which requests were slow, and which threads they crossed.
set -eu
build=$(cd "$1" && pwd)
out="$build/demo/demo.nettrace"
mkdir -p "$build/demo"
rm -f "$out"
echo "== LD_PRELOAD=$build/libacttrace.so demo_server 200 4 8"
ACTTRACE_OUTPUT="$out" ACTTRACE_ACCEPT_ACTIVITY=1 LD_PRELOAD="$build/libacttrace.so" \
  "$build/fixtures/demo_server" 200 4 8
echo
echo "== acttrace verify"
"$build/acttrace" verify "$out"
echo
echo "== acttrace stats: per activity name (every seventh lookup misses the cache: the tail)"
"$build/acttrace" stats "$out"
echo
echo "== acttrace tree --min-ms 1.2: the slow requests, each from its accept on the main thread"
echo "   through the hand-off (transfers) into a worker; first 18 lines"
"$build/acttrace" tree --min-ms 1.2 "$out" | head -18
echo
echo "More: $build/acttrace events|tree|stacks|export|report $out"
