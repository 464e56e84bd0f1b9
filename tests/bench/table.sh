#!/usr/bin/env bash
# table.sh: the performance table of docs/performance.md from saved `make bench` outputs.
#   make bench | tee bench-1.txt      (as many runs as wanted: the machine's speed swings)
#   tests/bench/table.sh bench-*.txt                              prints the Markdown table
#   tests/bench/table.sh --update docs/performance.md bench-*.txt puts it between the page's
#       <!-- make bench table: begin --> and <!-- make bench table: end --> lines
# Each row of the output is a row `make bench` printed (tests/bench/run.sh: metric, measured,
# target, columns at least two spaces apart). With several runs, a figure becomes the range of its
# leading number over the runs ("4.9–8.5 ns (3 runs)"); a row is matched across runs by its name
# with the numbers in it left out, so "(0 of 20000000 dropped)" in a name does not split it.
set -euo pipefail

usage() {
  echo "usage: tests/bench/table.sh [--update FILE] BENCH-OUTPUT..." >&2
  exit 2
}
update=
if [ "${1:-}" = "--update" ]; then
  [ $# -ge 3 ] || usage
  update=$2
  shift 2
fi
[ $# -ge 1 ] || usage
for f in "$@"; do
  [ -f "$f" ] || { echo "table.sh: $f: no such file" >&2; exit 1; }
done

table=$(awk '
  function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
  function cell(s) { gsub(/\|/, "\\|", s); return s }
  function target(t) {
    t = trim(t)
    if (t == "-") return ""
    sub(/^<= */, "≤ ", t); sub(/^>= */, "≥ ", t)
    return t
  }
  FNR == 1 { run++; intable = 0; delete seen }
  # the header of run.sh: "metric  measured  target", then a rule
  /^metric +measured +target *$/ { intable = 1; next }
  !intable || /^------/ { next }
  {
    line = $0
    indent = (line ~ /^  [^ ]/)
    line = trim(line)
    n = split(line, f, /  +|\t/)
    if (n < 2 || trim(f[2]) == "") next           # not a row: a line a benchmark let through
    metric = trim(f[1]); value = trim(f[2]); tgt = (n >= 3) ? f[3] : ""
    key = metric; gsub(/[0-9]+(\.[0-9]+)?/, "#", key)
    seen[key]++; key = key SUBSEP seen[key]
    if (!(key in name)) {
      order[++rows] = key; name[key] = (indent ? "↳ " : "") metric; tgts[key] = target(tgt)
    }
    vals[key, run] = value; nvals[key]++
  }
  END {
    if (!rows) { print "table.sh: no make bench table in the input" > "/dev/stderr"; exit 1 }
    print "| what | measured | target |"
    print "|---|---|---|"
    for (i = 1; i <= rows; i++) {
      k = order[i]; out = ""; lo = ""; hi = ""; unit = ""; ranged = 1; distinct = 0; delete d
      for (r = 1; r <= run; r++) {
        if (!((k, r) in vals)) continue
        v = vals[k, r]
        if (!(v in d)) { d[v] = 1; distinct++; list = (distinct == 1) ? v : list "; " v }
        # a leading number, its unit (the words up to a parenthesis), and no other number outside
        # parentheses: only then is a range meaningful
        if (match(v, /^[-+]?[0-9]+(\.[0-9]+)?/)) {
          num = substr(v, 1, RLENGTH) + 0; numtxt = substr(v, 1, RLENGTH)
          rest = substr(v, RLENGTH + 1); u = rest; sub(/\(.*/, "", u); u = trim(u)
          if (u ~ /[0-9]/ || (unit != "" && u != unit) || (r > 1 && lo == "")) ranged = 0
          unit = u
          if (lo == "" || num < lo) { lo = num; lotxt = numtxt }
          if (hi == "" || num > hi) { hi = num; hitxt = numtxt }
        } else ranged = 0
      }
      if (distinct == 1) out = list
      else if (ranged && nvals[k] > 1) out = lotxt "–" hitxt (unit == "" ? "" : unit ~ /^%/ ? unit : " " unit) " (" nvals[k] " runs)"
      else out = list
      printf "| %s | %s | %s |\n", cell(name[k]), cell(out), cell(tgts[k])
    }
  }
' "$@")

if [ -z "$update" ]; then
  printf '%s\n' "$table"
  exit 0
fi
begin='<!-- make bench table: begin -->'
end='<!-- make bench table: end -->'
grep -qxF "$begin" "$update" && grep -qxF "$end" "$update" || {
  echo "table.sh: $update has no '$begin' ... '$end' lines to put the table between" >&2
  exit 1
}
tmp=$(mktemp "$update.XXXXXX")
TABLE=$table awk -v b="$begin" -v e="$end" '
  $0 == b { print; print ENVIRON["TABLE"]; skip = 1; next }
  $0 == e { skip = 0 }
  !skip
' "$update" > "$tmp"
cat "$tmp" > "$update"
rm -f "$tmp"
echo "table.sh: $update: the table now holds $(printf '%s\n' "$table" | tail -n +3 | wc -l) rows from $# run(s)" >&2
