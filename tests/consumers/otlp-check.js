// otlp-check.js FILE: `acttrace export --format otlp` read with the OpenTelemetry protocol's own
// message definitions (opentelemetry-proto, compiled by protobufjs in @opentelemetry/otlp-transformer).
// The file must be an ExportTraceServiceRequest in OTLP's JSON mapping (trace and span ids as hex,
// 64-bit integers as decimal strings, enums as numbers): it is turned into the message, encoded to
// protobuf, decoded again, and the decoded message must give back the file's JSON exactly, so no key
// is unknown to the definitions, misspelled or of the wrong type (protobufjs drops what it does not
// know, which the comparison then sees). Ids must have their sizes (16 and 8 bytes), times must be
// ordered. Then one line per span:
//   span SERVICE NAME TRACEID SPANID PARENTID|- KIND DURATION_NS PATH
// and "ok N spans" last. Exit 1 with the reason otherwise.
'use strict';
const fs = require('fs');
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root');
const Req = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

function fail(msg) {
  console.error('otlp-check: ' + msg);
  process.exit(1);
}

const text = fs.readFileSync(process.argv[2], 'utf8');
let doc;
try { doc = JSON.parse(text); } catch (e) { fail('not JSON: ' + e.message); }

const ID_KEYS = new Set(['traceId', 'spanId', 'parentSpanId']);
// OTLP JSON -> protobufjs plain object: hex ids to bytes
function toProto(v, key) {
  if (Array.isArray(v)) return v.map((x) => toProto(x));
  if (v && typeof v === 'object') {
    const o = {};
    for (const [k, x] of Object.entries(v)) o[k] = toProto(x, k);
    return o;
  }
  if (ID_KEYS.has(key)) {
    if (typeof v !== 'string' || !/^[0-9a-f]*$/.test(v)) fail(`${key} ${JSON.stringify(v)} is not lowercase hex`);
    return Buffer.from(v, 'hex');
  }
  return v;
}
// the decoded message back in OTLP JSON: bytes as hex, longs as decimal strings, defaults left out
function toJson(v, key) {
  if (v instanceof Uint8Array) return Buffer.from(v).toString('hex');
  if (Array.isArray(v)) return v.map((x) => toJson(x));
  if (v && typeof v === 'object') {
    const o = {};
    for (const [k, x] of Object.entries(v)) o[k] = toJson(x, k);
    return o;
  }
  return v;
}
// the file's JSON with protobuf's defaults left out (an empty status, 0, false, "")
function prune(v) {
  if (Array.isArray(v)) return v.map(prune);
  if (v && typeof v === 'object') {
    const o = {};
    for (const [k, x] of Object.entries(v)) {
      const p = prune(x);
      if (p === undefined || p === 0 || p === '0' || p === false || p === '') continue;
      if (p && typeof p === 'object' && !Array.isArray(p) && Object.keys(p).length === 0 && k === 'status') continue;
      if (Array.isArray(p) && p.length === 0) continue;
      o[k] = p;
    }
    return o;
  }
  return v;
}

const plain = toProto(doc);
const err = Req.verify(Req.toObject(Req.fromObject(plain)));
if (err) fail('not an ExportTraceServiceRequest: ' + err);
const bytes = Req.encode(Req.fromObject(plain)).finish();
const back = Req.toObject(Req.decode(bytes), { longs: String, enums: Number, bytes: Uint8Array, defaults: false, arrays: false });
const a = JSON.stringify(prune(doc)), b = JSON.stringify(prune(toJson(back)));
if (a !== b) {
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  fail(`the file and its protobuf round trip differ at ${i}:\n  file: ${a.slice(Math.max(0, i - 80), i + 80)}\n  back: ${b.slice(Math.max(0, i - 80), i + 80)}`);
}
let n = 0;
for (const rs of doc.resourceSpans || []) {
  const attrs = Object.fromEntries(((rs.resource || {}).attributes || []).map((kv) => [kv.key, kv.value]));
  const service = attrs['service.name'] ? attrs['service.name'].stringValue : '?';
  for (const ss of rs.scopeSpans || []) {
    for (const s of ss.spans || []) {
      if (s.traceId.length !== 32 || /^0+$/.test(s.traceId)) fail(`span ${s.name}: traceId ${s.traceId}`);
      if (s.spanId.length !== 16 || /^0+$/.test(s.spanId)) fail(`span ${s.name}: spanId ${s.spanId}`);
      if (s.parentSpanId !== undefined && s.parentSpanId.length !== 16) fail(`span ${s.name}: parentSpanId ${s.parentSpanId}`);
      const t0 = BigInt(s.startTimeUnixNano), t1 = BigInt(s.endTimeUnixNano);
      if (t1 < t0 || t0 < 1000000000000000000n) fail(`span ${s.name}: times ${t0} ${t1}`);
      const path = (s.attributes || []).find((kv) => kv.key === 'acttrace.path');
      console.log(`span ${service} ${s.name} ${s.traceId} ${s.spanId} ${s.parentSpanId || '-'} ${s.kind} ${t1 - t0} ${path ? path.value.stringValue : '-'}`);
      n++;
    }
  }
}
console.log(`ok ${n} spans`);
