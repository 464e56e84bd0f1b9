#!/usr/bin/env bash
# make demo: trace an unmodified-looking server under the shim, then read the trace back.
# demo_server (tests/fixtures/demo_server.c) accepts on its main thread and hands connections to a
# worker pool through its own queue; client threads drive 200 requests over loopback.
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
echo "== one request, followed from the accepting thread into its worker (acttrace dump, filtered)"
"$build/acttrace" dump "$out" | awk '
  / acttrace-shim\/ConnectionStart / && !conn { split($0, f, " act="); split(f[2], g, " "); conn = g[2] }
  conn && (index($0, conn " ") || index($0, conn "/")) && !/FdTagged/ { print; n++ }
  n >= 14 { exit }'
