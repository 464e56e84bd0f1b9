#!/usr/bin/env bash
# make demo: run the bundled demo, then verify and dump the trace it wrote with our own reader.
set -eu
build=$1
out="$build/demo/demo.nettrace"
"$build/demo/demo_writer" "$out"
echo
"$build/acttrace" verify "$out"
echo
"$build/acttrace" dump "$out"
