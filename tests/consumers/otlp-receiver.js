// otlp-receiver.js: an OTLP/HTTP receiver for one request, decoded with the OpenTelemetry protocol's
// own message definitions (opentelemetry-proto, compiled by protobufjs in
// @opentelemetry/otlp-transformer). Listens on 127.0.0.1 (a free port), prints "listening PORT",
// takes one POST to /v1/traces with Content-Type application/x-protobuf, answers 200 with an empty
// ExportTraceServiceResponse, and prints the spans it decoded as otlp-check.js does:
//   span SERVICE NAME TRACEID SPANID PARENTID|- KIND DURATION_NS PATH
// then "ok N spans", and exits. A request of another path, method or type is answered 400 and is
// the exit status 1, as is a body that does not decode.
'use strict';
const http = require('http');
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root');
const v1 = root.opentelemetry.proto.collector.trace.v1;

const hex = (b) => Buffer.from(b || []).toString('hex');
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const bad = (why) => {
      res.writeHead(400);
      res.end(why);
      console.error('otlp-receiver: ' + why);
      server.close(() => process.exit(1));
    };
    if (req.method !== 'POST' || req.url !== '/v1/traces') return bad(`${req.method} ${req.url}`);
    if (req.headers['content-type'] !== 'application/x-protobuf') return bad('content-type ' + req.headers['content-type']);
    let msg;
    try {
      msg = v1.ExportTraceServiceRequest.decode(Buffer.concat(chunks));
    } catch (e) {
      return bad('the body does not decode: ' + e.message);
    }
    const obj = v1.ExportTraceServiceRequest.toObject(msg, { longs: String, enums: Number });
    let n = 0;
    for (const rs of obj.resourceSpans || []) {
      const attrs = Object.fromEntries(((rs.resource || {}).attributes || []).map((kv) => [kv.key, kv.value]));
      const service = attrs['service.name'] ? attrs['service.name'].stringValue : '?';
      for (const ss of rs.scopeSpans || []) {
        for (const s of ss.spans || []) {
          const path = (s.attributes || []).find((kv) => kv.key === 'acttrace.path');
          const parent = s.parentSpanId && s.parentSpanId.length ? hex(s.parentSpanId) : '-';
          const dur = BigInt(s.endTimeUnixNano) - BigInt(s.startTimeUnixNano);
          console.log(`span ${service} ${s.name} ${hex(s.traceId)} ${hex(s.spanId)} ${parent} ${s.kind} ${dur} ${path ? path.value.stringValue : '-'}`);
          n++;
        }
      }
    }
    res.writeHead(200, { 'Content-Type': 'application/x-protobuf' });
    res.end(v1.ExportTraceServiceResponse.encode({}).finish());
    console.log(`ok ${n} spans`);
    server.close(() => process.exit(0));
  });
});
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`));
