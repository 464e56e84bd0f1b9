#!/usr/bin/env node
// chrome-check.js FILE: reads a Chrome trace-event JSON file as strict consumers do and prints what
// they find, one fact a line, for test_export_consumers to assert on:
//   schema: the whole file against a JSON schema of the Trace Event Format made, at each run, by
//     typescript-json-schema from the types of @tracerbench/trace-event (Chrome's own JSON writer,
//     as TypeScript: every event carries pid, tid, ts, ph, cat, name and args, no other key is
//     allowed, flow ids are strings, bp is "e"), checked by ajv. Nothing here loosens it.
//   Perfetto's expectations: events in time order; per thread, after a stable sort by time as a
//     trace processor does, X and B/E slices nest (a slice starts and ends inside the one open
//     around it); every flow id has one start and one end of
//     one cat and name; a flow start lies in a slice of its thread, a flow end ("bp":"e") in one of
//     its own (the slice Perfetto binds it to: the innermost open there); process_name and
//     thread_name for every process and thread with slices.
// Prints "ok" last and exits 0 when every check passed; otherwise "FAIL: ..." lines and exit 1.
'use strict';
const fs = require('fs');
const path = require('path');

const file = process.argv[2];
if (!file) {
  console.error('usage: chrome-check.js FILE');
  process.exit(2);
}
const failures = [];
const fail = (msg) => failures.push(msg);

let doc;
try {
  doc = JSON.parse(fs.readFileSync(file, 'utf8'));
} catch (e) {
  console.log(`FAIL: not JSON: ${e.message}`);
  process.exit(1);
}

// ---- the schema, from the Trace Event Format's types ----
const TJS = require('typescript-json-schema');
const Ajv = require('ajv');
const types = path.join(path.dirname(require.resolve('@tracerbench/trace-event/package.json')), 'src', 'index.ts');
const program = TJS.getProgramFromFiles([types], {strict: true, skipLibCheck: true});
const settings = {required: true, noExtraProps: true, strictNullChecks: true, ignoreErrors: false};
const schema = TJS.generateSchema(program, 'TraceStreamJson', settings);
if (!schema) {
  console.log('FAIL: no schema from @tracerbench/trace-event');
  process.exit(1);
}
const ajv = new Ajv({allErrors: true, strict: false});
const validate = ajv.compile(schema);
if (!validate(doc)) {
  // anyOf over the phases reports every branch: name the first events that fail and why, per phase
  const bad = new Map();
  for (const e of validate.errors) {
    const m = /^\/traceEvents\/(\d+)/.exec(e.instancePath);
    const key = m ? +m[1] : -1;
    if (!bad.has(key)) bad.set(key, []);
    bad.get(key).push(`${e.instancePath} ${e.message}${e.params && e.params.additionalProperty ? ' (' + e.params.additionalProperty + ')' : ''}`);
  }
  let shown = 0;
  for (const [k, errs] of bad) {
    if (shown++ >= 5) break;
    const ev = k >= 0 ? JSON.stringify(doc.traceEvents[k]).slice(0, 200) : '(top level)';
    const own = errs.filter((s) => !/must be equal to constant|must match a schema in anyOf/.test(s));
    fail(`schema: ${ev}: ${(own.length ? own : errs).slice(0, 4).join('; ')}`);
  }
} else {
  console.log(`schema: valid (${doc.traceEvents.length} events)`);
}
const events = Array.isArray(doc.traceEvents) ? doc.traceEvents : [];

// ---- time order ----
let lastTs = -Infinity;
let ordered = true;
for (const e of events) {
  if (e.ph === 'M') continue;
  if (e.ts < lastTs) {
    ordered = false;
    fail(`order: ${JSON.stringify(e).slice(0, 160)} comes after ts ${lastTs}`);
    break;
  }
  lastTs = e.ts;
}
if (ordered) console.log('order: time order');

// ---- names ----
const procNames = new Map();
const threadNames = new Map();
for (const e of events) {
  if (e.ph !== 'M') continue;
  if (e.name === 'process_name') procNames.set(e.pid, e.args.name);
  if (e.name === 'thread_name') threadNames.set(`${e.pid}/${e.tid}`, e.args.name);
}

// ---- slices per thread, and where each flow end binds ----
const threads = new Map(); // "pid/tid" -> {slices: [{name, ts, end, args}], n}
const tkey = (e) => `${e.pid}/${e.tid}`;
for (const e of events) {
  if (e.ph !== 'X' && e.ph !== 'B' && e.ph !== 'E') continue;
  if (!threads.has(tkey(e))) threads.set(tkey(e), {open: [], all: [], bad: 0});
}
// Walks the events as a trace processor does: sorted by time (stably: at one time, in file order),
// per thread a stack of open slices.
const flows = new Map(); // id -> {s, f}
const timeline = events.filter((e) => e.ph !== 'M').map((e, i) => [e, i]);
timeline.sort((a, b) => a[0].ts - b[0].ts || a[1] - b[1]);
function top(t, ts) {
  // the innermost slice open at ts (X slices that ended before ts are closed first)
  while (t.open.length && t.open[t.open.length - 1].end !== null && t.open[t.open.length - 1].end < ts) t.open.pop();
  return t.open.length ? t.open[t.open.length - 1] : null;
}
for (const [e] of timeline) {
  const t = threads.get(tkey(e));
  if (e.ph === 'X' || e.ph === 'B') {
    const end = e.ph === 'X' ? e.ts + e.dur : null;
    // slices that ended at or before this start are done: it is their sibling, not their child
    while (t.open.length && t.open[t.open.length - 1].end !== null && t.open[t.open.length - 1].end <= e.ts) t.open.pop();
    const p = t.open.length ? t.open[t.open.length - 1] : null;
    if (p && p.end !== null && end !== null && end > p.end + 1e-6) {
      t.bad++;
      fail(`nesting: ${e.name} [${e.ts}, ${end}] on ${tkey(e)} outlives ${p.name} [${p.ts}, ${p.end}]`);
    }
    const s = {name: e.name, ts: e.ts, end, args: e.args, depth: t.open.length};
    t.open.push(s);
    t.all.push(s);
  } else if (e.ph === 'E') {
    const s = t.open.pop();
    if (!s) fail(`nesting: E without B on ${tkey(e)} at ${e.ts}`);
    else s.end = e.ts;
  } else if (e.ph === 's' || e.ph === 't' || e.ph === 'f') {
    if (e.ph === 't') continue;
    if (!flows.has(e.id)) flows.set(e.id, {});
    const fl = flows.get(e.id);
    if (fl[e.ph]) fail(`flow ${e.id}: two "${e.ph}" events`);
    const th = threads.get(tkey(e));
    const at = th ? top(th, e.ts) : null;
    const inside = at && at.ts <= e.ts && (at.end === null || e.ts <= at.end);
    fl[e.ph] = {e, slice: inside ? at : null};
    if (e.ph === 'f' && e.bp !== 'e') fail(`flow ${e.id}: its end does not bind to the enclosing slice (bp "e")`);
  }
}
for (const [k, t] of threads) {
  if (!t.bad) console.log(`thread ${k} ${JSON.stringify(threadNames.get(k) || null)}: ${t.all.length} slices, nested`);
  if (!threadNames.has(k)) fail(`thread ${k} has no thread_name`);
  const pid = +k.split('/')[0];
  if (!procNames.has(pid)) fail(`process ${pid} has no process_name`);
}
for (const [pid, name] of [...procNames].sort((a, b) => a[0] - b[0])) console.log(`process ${pid} ${JSON.stringify(name)}`);
const flowLines = [];
for (const [id, fl] of flows) {
  if (!fl.s || !fl.f) {
    fail(`flow ${id}: ${fl.s ? 'no end' : 'no start'}`);
    continue;
  }
  if (fl.s.e.cat !== fl.f.e.cat || fl.s.e.name !== fl.f.e.name) fail(`flow ${id}: start and end differ in cat or name`);
  if (fl.f.e.ts < fl.s.e.ts) fail(`flow ${id}: ends before it starts`);
  if (!fl.s.slice) fail(`flow ${id} (${fl.s.e.name}): its start at ${fl.s.e.ts} on ${tkey(fl.s.e)} is in no slice`);
  if (!fl.f.slice) fail(`flow ${id} (${fl.f.e.name}): its end at ${fl.f.e.ts} on ${tkey(fl.f.e)} is in no slice`);
  if (fl.s.slice && fl.f.slice)
    flowLines.push(`flow ${fl.s.e.name}: ${fl.s.slice.name} on ${tkey(fl.s.e)} -> ${fl.f.slice.name} on ${tkey(fl.f.e)}`);
}
for (const l of flowLines.sort()) console.log(l);

// ---- each slice with its args (what Perfetto's details panel lists) ----
const sliceLines = [];
for (const [k, t] of threads)
  for (const s of t.all) {
    const a = Object.assign({}, s.args);
    const own = a.acttrace || {};
    delete a.acttrace;
    sliceLines.push(`slice ${k} ${'  '.repeat(s.depth)}${s.name} ${own.path}${own.visit ? ' visit' : ''}${own.clipped ? ' clipped' : ''} ${JSON.stringify(a)}`);
  }
for (const l of sliceLines) console.log(l);

for (const f of failures) console.log(`FAIL: ${f}`);
if (failures.length) process.exit(1);
console.log('ok');
