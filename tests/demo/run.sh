#!/usr/bin/env bash
# make demo: trace a server that knows nothing of tracing, with a config, then read the trace back.
# demo_server (tests/fixtures/demo_server.c) accepts on its main thread and hands connections to a
# worker pool through its own queue; client threads drive 200 requests over loopback. The config
# (tests/demo/demo.conf) names its functions; the analysis commands then answer which requests were
# slow, where their time went, and which threads they crossed.
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
conf="$src/tests/demo/demo.conf"
out="$build/demo/demo.nettrace"
mkdir -p "$build/demo"
rm -f "$out"
echo "== acttrace check tests/demo/demo.conf -- demo_server: where each function is and how it is hooked"
"$build/acttrace" check "$conf" -- "$build/fixtures/demo_server"
echo
echo "== acttrace run -c tests/demo/demo.conf -- demo_server 200 4 8"
"$build/acttrace" run -c "$conf" -o "$out" -- "$build/fixtures/demo_server" 200 4 8
echo
echo "== acttrace verify"
"$build/acttrace" verify "$out" | tail -1
echo
echo "== acttrace stats: per activity (every seventh lookup misses the cache: the tail)"
"$build/acttrace" stats "$out"
echo
echo "== acttrace tree: the server's run, and its first connection from accept to close (the first 6 lines)"
"$build/acttrace" tree "$out" | head -n 6
echo
echo "== acttrace tree --min-ms 1.2: the slow requests, each from its accept on the main thread"
echo "   through the server's own queue (a transfer) into a worker; the first 12 lines"
"$build/acttrace" tree --min-ms 1.2 "$out" | head -12
echo
echo "More: $build/acttrace events|tree|stacks|export|report $out"
