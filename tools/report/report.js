/* report.js: the script of the page `acttrace report` writes (the data format is described in
 * tools/cmd_report.c). Plain DOM, SVG and <canvas>, no library. It decodes the activities into typed
 * arrays, then builds the summary, the timeline (drawn on a canvas: what does not fit a pixel column
 * at the current zoom is merged into that column and counted, never dropped), the search, the
 * activity table (sorted, paged), the waterfall of a chosen activity, the histograms and the flame
 * graphs. window.acttraceReport gives the browser tests (tests/web) read-outs of its state. */
(function () {
'use strict';

/* ---------------- helpers ---------------- */

const $ = (id) => document.getElementById(id);
const readJSON = (id) => JSON.parse($(id).textContent);
const SVGNS = 'http://www.w3.org/2000/svg';
const t00 = performance.now();

function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function htmlEl(tag, attrs, text, parent) {
  const e = document.createElement(tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined && text !== null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
}
const fmtInt = (n) => Number(n).toLocaleString('en-US');

/* A duration in the unit that shows it with three significant digits: 240 ns, 412 µs, 7.50 ms, 1.50 s. */
function fmtDur(ns) {
  const a = Math.abs(ns);
  if (a < 999.5) return Math.round(ns) + ' ns';
  const u = a >= 999.5e6 ? [1e9, 's'] : a >= 999.5e3 ? [1e6, 'ms'] : [1e3, 'µs'];
  const v = ns / u[0], av = Math.abs(v);
  return (av < 9.995 ? v.toFixed(2) : av < 99.95 ? v.toFixed(1) : v.toFixed(0)) + ' ' + u[1];
}
/* The unit that suits a value (ns): [divisor, name]. */
function unitFor(ns) {
  const a = Math.abs(ns);
  return a >= 1e9 ? [1e9, 's'] : a >= 1e6 ? [1e6, 'ms'] : a >= 1e3 ? [1e3, 'µs'] : [1, 'ns'];
}
/* A point in time (ns since the trace start) precise enough for a view of span ns. */
function fmtTime(t, span) {
  const u = unitFor(Math.max(Math.abs(t), span));
  const dec = Math.max(0, Math.min(9, Math.ceil(-Math.log10(Math.max(span, 1) / u[0])) + 2));
  return (t / u[0]).toFixed(dec) + ' ' + u[1];
}
const fmtMs = (ns) => (ns / 1e6).toFixed(3);
/* 1, 2 or 5 times a power of ten, at least raw. */
function niceStep(raw) {
  if (!(raw > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw * 0.9999) return m * p;
  return 10 * p;
}
function decimalsFor(step, div) {
  return Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / div) - 1e-9)));
}
function lowerBound(arr, n, v) { /* first i with arr[i] >= v */
  let lo = 0, hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (arr[mid] < v) lo = mid + 1; else hi = mid;
  }
  return lo;
}
function hslToRgb(h, s, l) {
  s /= 100; l /= 100;
  const k = (n) => (n + h / 30) % 12, a = s * Math.min(l, 1 - l);
  const f = (n) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
  return [Math.round(255 * f(0)), Math.round(255 * f(8)), Math.round(255 * f(4))];
}

/* ---------------- data ---------------- */

const META = readJSON('report-meta');
const D = readJSON('report-data');
const S = D.strings;
const NAMES = D.names;
const NN = NAMES.length;

/* name slots: alphabetical rank, colours (hues spread by the golden angle over the sorted names) */
const nameSlotOfStr = new Map();
NAMES.forEach((n, k) => nameSlotOfStr.set(n.s, k));
const nameOrder = NAMES.map((n, k) => k).sort((a, b) => (S[NAMES[a].s] < S[NAMES[b].s] ? -1 : S[NAMES[a].s] > S[NAMES[b].s] ? 1 : 0));
const nameRank = new Uint32Array(NN);
nameOrder.forEach((k, r) => { nameRank[k] = r; });
const HUE = new Float64Array(NN), COLOR = [], FADED = [];
nameOrder.forEach((k, r) => {
  HUE[k] = (r * 137.508 + 205) % 360;
  COLOR[k] = 'hsl(' + HUE[k].toFixed(1) + ',62%,58%)';
  FADED[k] = 'hsl(' + HUE[k].toFixed(1) + ',30%,80%)';
});
const nameOf = (k) => S[NAMES[k].s];

/* activities: one record each (see cmd_report.c) */
const A = (function decode() {
  const R = readJSON('report-acts');
  let n = 0, nv = 0, nx = 0;
  for (let p = 0; p < R.length; n++) {
    const f = R[p];
    p += 9;
    if (f & 2) p += 2;
    if (f & 4) { nv += R[p]; p += 1 + 3 * R[p]; }
    if (f & 8) { nx += R[p]; p += 1 + 4 * R[p]; }
    if (f & 16) p += 1;
    if (f & 32) p += 1;
    if (f & 64) p += 2;
  }
  const a = {
    n, serial: new Float64Array(n), nm: new Uint32Array(n), thr: new Uint32Array(n),
    st: new Float64Array(n), en: new Float64Array(n), end0: new Float64Array(n), pser: new Float64Array(n),
    parent: new Int32Array(n), pathk: new Float64Array(n), stack: new Uint32Array(n), flags: new Uint8Array(n),
    stopThr: new Int32Array(n), vOff: new Uint32Array(n + 1), vThr: new Uint32Array(nv), vFrom: new Float64Array(nv),
    vTo: new Float64Array(nv), xOff: new Uint32Array(n + 1), xFrom: new Int32Array(nx), xTo: new Uint32Array(nx),
    xSend: new Float64Array(nx), xRecv: new Float64Array(nx), xDrop: new Map(), link: new Map(),
    cpu: new Map(), blk: new Map(), /* ns, for the activities with CPU samples or waits */
  };
  let p = 0, serial = 0, start = 0, vi = 0, xi = 0;
  for (let i = 0; i < n; i++) {
    const f = R[p];
    serial += R[p + 1];
    start += R[p + 4];
    a.flags[i] = f;
    a.serial[i] = serial;
    a.nm[i] = nameSlotOfStr.get(R[p + 2]);
    a.thr[i] = R[p + 3];
    a.st[i] = start;
    a.en[i] = a.end0[i] = start + R[p + 5];
    a.pser[i] = R[p + 6] ? serial - R[p + 6] : 0;
    a.pathk[i] = R[p + 7];
    a.stack[i] = R[p + 8];
    a.stopThr[i] = a.thr[i];
    p += 9;
    if (f & 2) { a.stopThr[i] = R[p]; a.end0[i] = start + R[p + 1]; p += 2; }
    a.vOff[i] = vi;
    if (f & 4) {
      const k = R[p++];
      for (let j = 0; j < k; j++, p += 3, vi++) { a.vThr[vi] = R[p]; a.vFrom[vi] = start + R[p + 1]; a.vTo[vi] = start + R[p + 2]; }
    }
    a.xOff[i] = xi;
    if (f & 8) {
      const k = R[p++];
      for (let j = 0; j < k; j++, p += 4, xi++) {
        a.xFrom[xi] = R[p]; a.xTo[xi] = R[p + 1]; a.xSend[xi] = start + R[p + 2]; a.xRecv[xi] = start + R[p + 3];
      }
    }
    if (f & 16) a.xDrop.set(i, R[p++]);
    if (f & 32) a.link.set(i, S[R[p++]]);
    if (f & 64) { a.cpu.set(i, R[p] * 1000); a.blk.set(i, R[p + 1] * 1000); p += 2; }
  }
  a.vOff[n] = vi;
  a.xOff[n] = xi;
  /* parents by serial */
  let maxSerial = 0;
  for (let i = 0; i < n; i++) if (a.serial[i] > maxSerial) maxSerial = a.serial[i];
  const rowOfSerial = new Int32Array(maxSerial + 1).fill(-1);
  for (let i = 0; i < n; i++) rowOfSerial[a.serial[i]] = i;
  for (let i = 0; i < n; i++) a.parent[i] = a.pser[i] ? rowOfSerial[a.pser[i]] : -1;
  a.rowOfSerial = rowOfSerial;
  /* children lists (sorted by start when first used) */
  const cnt = new Uint32Array(n + 1);
  for (let i = 0; i < n; i++) if (a.parent[i] >= 0) cnt[a.parent[i]]++;
  a.kOff = new Uint32Array(n + 1);
  for (let i = 0; i < n; i++) a.kOff[i + 1] = a.kOff[i] + cnt[i];
  a.kids = new Uint32Array(a.kOff[n]);
  const fill = a.kOff.slice(0, n);
  for (let i = 0; i < n; i++) if (a.parent[i] >= 0) a.kids[fill[a.parent[i]]++] = i;
  a.kSorted = new Uint8Array(n);
  a.dur = new Float64Array(n);
  for (let i = 0; i < n; i++) a.dur[i] = a.en[i] - a.st[i];
  return a;
})();
const N = A.n;

/* threads and processes */
const THREADS = D.threads.map((t, i) => ({ i, pid: t[0], tid: t[1] }));
const PROCS = new Map();
D.procs.forEach((p) => {
  const q = PROCS.get(p.pid) || { pid: p.pid, cmd: '', files: [] };
  if (!q.cmd && p.cmd) q.cmd = p.cmd;
  q.files.push(p.file);
  PROCS.set(p.pid, q);
});
const pidOf = (row) => THREADS[A.thr[row]].pid;
const tidOf = (t) => THREADS[t].tid;

/* events inside activities, by row */
const MARKS = (function () {
  const m = D.marks, k = m.length / 4;
  const row = new Int32Array(k), cnt = new Uint32Array(N + 1);
  for (let i = 0; i < k; i++) {
    const s = m[4 * i];
    row[i] = s < A.rowOfSerial.length ? A.rowOfSerial[s] : -1;
    if (row[i] >= 0) cnt[row[i]]++;
  }
  const off = new Uint32Array(N + 1);
  for (let i = 0; i < N; i++) off[i + 1] = off[i] + cnt[i];
  const list = new Uint32Array(off[N]), fill = off.slice(0, N);
  for (let i = 0; i < k; i++) if (row[i] >= 0) list[fill[row[i]]++] = i;
  return { off, list, time: (i) => m[4 * i + 1], name: (i) => S[m[4 * i + 2]], stack: (i) => m[4 * i + 3], text: (i) => D.marktext[i] };
})();

function pathOf(r) {
  const parts = [];
  for (let x = r, guard = 0; x >= 0 && guard < 2000; guard++) {
    const v = A.pathk[x];
    if (v < 0) { parts.push(S[-v - 1]); break; }
    const k = Math.floor(v / 2);
    if (v % 2 === 1 && A.parent[x] >= 0) { parts.push('/' + k); x = A.parent[x]; continue; }
    parts.push('//' + k);
    break;
  }
  return parts.reverse().join('');
}
function threadsOf(r) { /* start thread first, then the others it visited */
  const t = [A.thr[r]];
  for (let j = A.vOff[r]; j < A.vOff[r + 1]; j++) if (!t.includes(A.vThr[j])) t.push(A.vThr[j]);
  if (!t.includes(A.stopThr[r])) t.push(A.stopThr[r]);
  return t;
}
function kidsOf(r) {
  const a = A.kOff[r], b = A.kOff[r + 1];
  if (!A.kSorted[r] && b - a > 1) {
    const sub = Array.from(A.kids.subarray(a, b)).sort((x, y) => A.st[x] - A.st[y] || x - y);
    A.kids.set(sub, a);
  }
  A.kSorted[r] = 1;
  return A.kids.subarray(a, b);
}
const isOpen = (r) => (A.flags[r] & 1) !== 0;

/* trace extent */
let T0 = Infinity, T1 = -Infinity;
for (let i = 0; i < N; i++) { if (A.st[i] < T0) T0 = A.st[i]; if (A.en[i] > T1) T1 = A.en[i]; }
for (let j = 0; j < A.xRecv.length; j++) if (A.xRecv[j] > T1) T1 = A.xRecv[j];
if (!(T0 < Infinity)) { T0 = 0; T1 = 1; }
if (!(T1 > T0)) T1 = T0 + 1000;
const tDecoded = performance.now();

/* ---------------- search state ---------------- */

let query = '', exact = false;
const matchSlot = new Uint8Array(NN);
let matchCount = N;
const isMatch = (r) => !query || matchSlot[A.nm[r]] === 1;
let selRow = -1;

/* ---------------- summary ---------------- */

(function summary() {
  const procs = [...PROCS.values()];
  const parts = [];
  const files = META.files.map((f) => esc(f)).join(', ');
  parts.push('<b>' + files + '</b>');
  parts.push(procs.map((p) => 'pid ' + p.pid + (p.cmd ? ' <code>' + esc(p.cmd) + '</code>' : '')).join(', '));
  parts.push('<b id="sum-acts">' + fmtInt(N) + '</b> activities of ' + NN + ' name' + (NN === 1 ? '' : 's') + ' on ' +
    THREADS.length + ' thread' + (THREADS.length === 1 ? '' : 's') + ' in ' + procs.length + ' process' + (procs.length === 1 ? '' : 'es'));
  parts.push('spanning ' + fmtDur(T1 - T0) + ' (from ' + fmtTime(T0, T1 - T0) + ' to ' + fmtTime(T1, T1 - T0) + ' after the trace start)');
  if (META.never) parts.push(fmtInt(META.never) + ' never stopped');
  const warn = [];
  if (META.lost) warn.push(fmtInt(META.lost) + ' events were lost by the writer: what they held is missing here');
  if (META.damaged) warn.push(META.damaged + ' file(s) damaged: only what was read before the damage is shown');
  if (META.unmatched) warn.push(fmtInt(META.unmatched) + ' Stop event' + (META.unmatched === 1 ? '' : 's') +
    ' matched no open activity; the first: ' + META.unmatched_first);
  if (META.xfers_dropped) warn.push(fmtInt(META.xfers_dropped) + ' transfers beyond the per-activity cap are not drawn');
  if (META.marks_cut) warn.push(fmtInt(META.marks_cut) + ' events inside activities are not listed in waterfalls (past the first ' + fmtInt(D.marks.length / 4) + ')');
  $('summary').innerHTML = parts.join(' · ') + '.' + warn.map((w) => '<br><span class="warn">' + esc(w) + '.</span>').join('');
})();

/* ---------------- timeline ---------------- */

const AXIS_H = 30, GUTTER = 200, LH = 17, PROC_H = 20, TH_PAD = 3, MAX_LANES = 24, MINW = 2, XFER_ARROWS = 150;
const TL = (function layout() {
  /* slices per thread: the start thread's (start to stop, or to its last event there when it stopped
   * elsewhere) and one per other thread visited */
  const nT = THREADS.length;
  const cnt = new Uint32Array(nT);
  for (let i = 0; i < N; i++) cnt[A.thr[i]]++;
  for (let j = 0; j < A.vThr.length; j++) cnt[A.vThr[j]]++;
  const per = THREADS.map((t, k) => ({ t: k, n: 0, st: new Float64Array(cnt[k]), en: new Float64Array(cnt[k]), act: new Uint32Array(cnt[k]), first: Infinity }));
  const push = (t, s, e, r) => { const q = per[t]; q.st[q.n] = s; q.en[q.n] = e; q.act[q.n++] = r; if (s < q.first) q.first = s; };
  for (let i = 0; i < N; i++) {
    push(A.thr[i], A.st[i], A.end0[i], i);
    for (let j = A.vOff[i]; j < A.vOff[i + 1]; j++) push(A.vThr[j], A.vFrom[j], A.vTo[j], i);
  }
  const laneOfRow = new Uint8Array(N);
  const rows = [];
  for (const q of per) {
    const idx = new Uint32Array(q.n);
    for (let i = 0; i < q.n; i++) idx[i] = i;
    const st = q.st, en = q.en;
    idx.sort((a, b) => st[a] - st[b] || en[b] - en[a]);
    const laneEnd = [], lanes = [];
    for (let k = 0; k < q.n; k++) {
      const i = idx[k], s = st[i], e = en[i];
      let l = 0;
      while (l < laneEnd.length && laneEnd[l] > s) l++;
      if (l === MAX_LANES) l = MAX_LANES - 1; /* deeper than the lanes: drawn over the last one */
      if (l === laneEnd.length) { laneEnd.push(e); lanes.push([]); }
      else if (e > laneEnd[l]) laneEnd[l] = e;
      lanes[l].push(i);
      const r = q.act[i];
      if (THREADS[q.t] && A.thr[r] === q.t && st[i] === A.st[r]) laneOfRow[r] = l;
    }
    if (!lanes.length) lanes.push([]);
    const L = lanes.map((list) => {
      const m = list.length, o = { n: m, st: new Float64Array(m), en: new Float64Array(m), me: new Float64Array(m), act: new Uint32Array(m) };
      let mx = -Infinity;
      for (let k = 0; k < m; k++) {
        const i = list[k];
        o.st[k] = st[i]; o.en[k] = en[i]; o.act[k] = q.act[i];
        if (en[i] > mx) mx = en[i];
        o.me[k] = mx;
      }
      return o;
    });
    rows.push({ t: q.t, pid: THREADS[q.t].pid, tid: THREADS[q.t].tid, first: q.first, slices: q.n, lanes: L, y: 0, h: 0 });
  }
  /* processes in order of their first activity, threads likewise */
  const pfirst = new Map();
  for (const r of rows) pfirst.set(r.pid, Math.min(pfirst.has(r.pid) ? pfirst.get(r.pid) : Infinity, r.first));
  rows.sort((a, b) => (pfirst.get(a.pid) - pfirst.get(b.pid)) || (a.pid - b.pid) || (a.first - b.first) || (a.tid - b.tid));
  const bands = []; /* process headers and thread rows, in drawing order */
  let y = 0, pid = null;
  const threadRow = new Array(nT);
  for (const r of rows) {
    if (r.pid !== pid) {
      pid = r.pid;
      bands.push({ proc: true, pid, y, h: PROC_H, threads: rows.filter((x) => x.pid === pid).length });
      y += PROC_H;
    }
    r.y = y;
    r.h = r.lanes.length * LH + 2 * TH_PAD;
    y += r.h;
    bands.push(r);
    threadRow[r.t] = r;
  }
  /* transfers by send time */
  const nx = A.xSend.length, xi = new Uint32Array(nx), xrow = new Uint32Array(nx);
  for (let i = 0; i < N; i++) for (let j = A.xOff[i]; j < A.xOff[i + 1]; j++) xrow[j] = i;
  for (let j = 0; j < nx; j++) xi[j] = j;
  xi.sort((a, b) => A.xSend[a] - A.xSend[b]);
  const xs = new Float64Array(nx);
  let maxSpan = 0;
  for (let k = 0; k < nx; k++) {
    xs[k] = A.xSend[xi[k]];
    maxSpan = Math.max(maxSpan, A.xRecv[xi[k]] - A.xSend[xi[k]]);
  }
  return { rows, bands, height: y, threadRow, laneOfRow, xOrder: xi, xSendSorted: xs, xRow: xrow, xMaxSpan: maxSpan };
})();
const tLayout = performance.now();

const cv = $('tl-canvas'), scroller = $('tl-scroll'), spacer = $('tl-spacer');
const ctx = cv.getContext('2d', { alpha: false });
const PAD = (T1 - T0) * 0.01;
let v0 = T0 - PAD, v1 = T1 + PAD;
let cssW = 0, cssH = 0, plotW = 1, kx = 1;
const stats = { rects: 0, columns: 0, merged: 0, xfers: 0, draws: 0, ms: 0 };
let bins = new Uint32Array(0), binName = new Int32Array(0), binMatch = new Uint32Array(0), binMName = new Int32Array(0);

function sizeCanvas() {
  const dpr = window.devicePixelRatio || 1;
  cssW = Math.max(400, scroller.clientWidth);
  const maxH = Math.max(160, Math.round(window.innerHeight * 0.62) - 2);
  cssH = Math.min(AXIS_H + TL.height + 2, maxH);
  cv.style.height = cssH + 'px';
  spacer.style.height = Math.max(0, AXIS_H + TL.height + 2 - cssH) + 'px';
  cv.width = Math.round(cssW * dpr);
  cv.height = Math.round(cssH * dpr);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  plotW = cssW - GUTTER;
  bins = new Uint32Array(plotW + 2);
  binName = new Int32Array(plotW + 2);
  binMatch = new Uint32Array(plotW + 2);
  binMName = new Int32Array(plotW + 2);
}

const xOf = (t) => GUTTER + (t - v0) * kx;
const tOf = (x) => v0 + (x - GUTTER) / kx;
const yOfContent = (y) => AXIS_H + y - scroller.scrollTop;

let drawPending = false;
function requestDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; draw(); });
}

function draw() {
  const t0 = performance.now();
  kx = plotW / (v1 - v0);
  stats.rects = stats.columns = stats.merged = stats.xfers = 0;
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, cssW, cssH);
  const top = scroller.scrollTop, bottom = top + cssH - AXIS_H;
  const tk = axisTicks();
  ctx.save();
  ctx.beginPath();
  ctx.rect(GUTTER, AXIS_H, plotW, cssH - AXIS_H);
  ctx.clip();
  /* bands and grid */
  let odd = false;
  for (const b of TL.bands) {
    if (b.y + b.h < top || b.y > bottom) { if (!b.proc) odd = !odd; continue; }
    const y = yOfContent(b.y);
    if (b.proc) { ctx.fillStyle = '#eef0f6'; ctx.fillRect(GUTTER, y, plotW, b.h); }
    else { ctx.fillStyle = odd ? '#fafbfc' : '#fff'; ctx.fillRect(GUTTER, y, plotW, b.h); odd = !odd; }
  }
  ctx.strokeStyle = '#e6e9ee';
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (const t of tk.list) { const x = Math.round(xOf(t)) + 0.5; ctx.moveTo(x, AXIS_H); ctx.lineTo(x, cssH); }
  ctx.stroke();
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  for (const r of TL.rows) {
    if (r.y + r.h < top || r.y > bottom) continue;
    for (let l = 0; l < r.lanes.length; l++) {
      const ly = r.y + TH_PAD + l * LH;
      if (ly + LH < top || ly > bottom) continue;
      drawLane(r.lanes[l], yOfContent(ly));
    }
  }
  drawTransfers(top, bottom);
  ctx.restore();
  drawGutter(top, bottom);
  drawAxis(tk);
  stats.draws++;
  stats.ms = performance.now() - t0;
  updateRange();
}

function drawLane(L, y) {
  const n = L.n, st = L.st, en = L.en, act = L.act;
  let i = lowerBound(L.me, n, v0);
  let cmin = plotW, cmax = -1;
  const h = LH - 2;
  let lastFill = '';
  const labels = [], sel = [];
  for (; i < n; i++) {
    const s = st[i];
    if (s > v1) break;
    const e = en[i];
    if (e < v0) continue;
    const r = act[i];
    const x0 = (s - v0) * kx, x1 = (e - v0) * kx;
    if (r === selRow) sel.push(x0, x1);
    if (x1 - x0 >= MINW) {
      const a = Math.max(x0, -2), b = Math.min(x1, plotW + 2);
      const m = isMatch(r), k = A.nm[r];
      const fill = m ? COLOR[k] : '#dfe2e6';
      if (fill !== lastFill) { ctx.fillStyle = fill; lastFill = fill; }
      ctx.globalAlpha = isOpen(r) ? 0.5 : 1;
      ctx.fillRect(GUTTER + a, y, b - a, h);
      if (b - a > 5) {
        ctx.globalAlpha = 1;
        ctx.strokeStyle = m ? 'rgba(0,0,0,.35)' : 'rgba(0,0,0,.12)';
        ctx.strokeRect(GUTTER + a + 0.5, y + 0.5, b - a - 1, h - 1);
      }
      if (b - a > 38) labels.push(GUTTER + a, b - a, r);
      stats.rects++;
    } else {
      let c = Math.floor(x0);
      if (c < 0) c = 0; else if (c >= plotW) c = plotW - 1;
      if (bins[c] === 0) { binName[c] = A.nm[r]; binMatch[c] = 0; } else if (binName[c] !== A.nm[r]) binName[c] = -1;
      bins[c]++;
      if (query && isMatch(r)) {
        if (binMatch[c] === 0) binMName[c] = A.nm[r]; else if (binMName[c] !== A.nm[r]) binMName[c] = -1;
        binMatch[c]++;
      }
      if (c < cmin) cmin = c;
      if (c > cmax) cmax = c;
      stats.merged++;
    }
  }
  ctx.globalAlpha = 1;
  /* the merged columns: the name's colour when of one name, grey when of several; darker: more */
  for (let c = cmin; c <= cmax; c++) {
    const k = bins[c];
    if (!k) continue;
    const dense = Math.min(1, Math.log2(k) / 8);
    let fill;
    if (query) fill = !binMatch[c] ? '#d5d9de' : binMName[c] >= 0 ? COLOR[binMName[c]] : '#6b7785';
    else fill = binName[c] >= 0 ? COLOR[binName[c]] : '#6b7785';
    ctx.globalAlpha = 0.7 + 0.3 * dense;
    ctx.fillStyle = fill;
    ctx.fillRect(GUTTER + c, y, 1, h);
    if (dense > 0.25) { /* many: a darker core */
      ctx.globalAlpha = dense * 0.6;
      ctx.fillStyle = '#1d2330';
      ctx.fillRect(GUTTER + c, y + h * 0.3, 1, h * 0.4);
    }
    bins[c] = 0;
    stats.columns++;
  }
  ctx.globalAlpha = 1;
  for (let k = 0; k < labels.length; k += 3) {
    const x = labels[k], w = labels[k + 1], r = labels[k + 2];
    ctx.fillStyle = isMatch(r) ? '#111' : '#8a929c';
    let t = nameOf(A.nm[r]);
    if (w > t.length * 6.4 + 70) t += '  ' + fmtDur(A.dur[r]);
    const fit = Math.floor((w - 8) / 6.4);
    if (fit < 3) continue;
    if (t.length > fit) t = t.slice(0, fit - 1) + '…';
    ctx.fillText(t, Math.max(x, GUTTER) + 4, y + h / 2 + 0.5);
  }
  /* the selected activity, outlined */
  for (let k = 0; k < sel.length; k += 2) {
    const a = Math.max(sel[k], -2), b = Math.min(Math.max(sel[k + 1], a + 2), plotW + 2);
    ctx.strokeStyle = '#111';
    ctx.lineWidth = 2;
    ctx.strokeRect(GUTTER + a - 1, y - 1, b - a + 2, h + 2);
    ctx.lineWidth = 1;
  }
}

function laneMid(t) {
  const r = TL.threadRow[t];
  return r ? r.y + TH_PAD + LH / 2 - 1 : null;
}

function drawTransfers(top, bottom) {
  const n = TL.xSendSorted.length;
  if (!n) { $('tl-note').textContent = ''; return; }
  let i = lowerBound(TL.xSendSorted, n, v0 - TL.xMaxSpan);
  const vis = [];
  for (; i < n && TL.xSendSorted[i] <= v1; i++) {
    const j = TL.xOrder[i];
    if (A.xRecv[j] >= v0) vis.push(j);
  }
  /* arrows while they can be told apart; past that, only the selected activity's */
  const all = vis.length <= XFER_ARROWS;
  $('tl-note').textContent = all ? '' : fmtInt(vis.length) + ' transfers in view: zoom in (or click an activity) to see their arrows';
  ctx.strokeStyle = '#d9480f';
  ctx.fillStyle = '#d9480f';
  ctx.lineWidth = 1.3;
  for (const j of vis) {
    const row = TL.xRow[j];
    if ((query && !isMatch(row)) || (!all && row !== selRow)) continue;
    const yb = laneMid(A.xTo[j]);
    const ya = A.xFrom[j] >= 0 ? laneMid(A.xFrom[j]) : null;
    if (yb === null) continue;
    const xb = xOf(A.xRecv[j]), y2 = yOfContent(yb);
    if (ya !== null) {
      const xa = xOf(A.xSend[j]), y1 = yOfContent(ya);
      if (Math.max(y1, y2) < AXIS_H || Math.min(y1, y2) > cssH) continue;
      ctx.beginPath();
      ctx.moveTo(xa, y1);
      ctx.lineTo(xb, y2);
      ctx.stroke();
      const ang = Math.atan2(y2 - y1, xb - xa);
      ctx.beginPath();
      ctx.moveTo(xb, y2);
      ctx.lineTo(xb - 7 * Math.cos(ang - 0.4), y2 - 7 * Math.sin(ang - 0.4));
      ctx.lineTo(xb - 7 * Math.cos(ang + 0.4), y2 - 7 * Math.sin(ang + 0.4));
      ctx.closePath();
      ctx.fill();
    } else {
      ctx.beginPath();
      ctx.arc(xb, y2, 3, 0, 2 * Math.PI);
      ctx.fill();
    }
    stats.xfers++;
  }
  ctx.lineWidth = 1;
}

function drawGutter(top, bottom) {
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, AXIS_H, GUTTER, cssH - AXIS_H);
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, AXIS_H, cssW, cssH - AXIS_H);
  ctx.clip();
  ctx.textBaseline = 'middle';
  for (const b of TL.bands) {
    if (b.y + b.h < top || b.y > bottom) continue;
    const y = yOfContent(b.y);
    if (b.proc) {
      ctx.fillStyle = '#eef0f6';
      ctx.fillRect(0, y, GUTTER, b.h);
      ctx.fillStyle = '#3b2a80';
      ctx.font = '600 11px system-ui, sans-serif';
      ctx.fillText('pid ' + b.pid + ' · ' + b.threads + ' thread' + (b.threads === 1 ? '' : 's'), 6, y + b.h / 2);
      const p = PROCS.get(b.pid);
      ctx.font = '11px system-ui, sans-serif';
      ctx.fillText((p && p.cmd ? p.cmd : '') + (p ? '   (' + p.files.join(', ') + ')' : ''), GUTTER + 6, y + b.h / 2, plotW - 12);
    } else {
      ctx.fillStyle = '#1d2330';
      ctx.font = '11px system-ui, sans-serif';
      const count = fmtInt(b.slices) + (b.slices === 1 ? ' slice' : ' slices');
      if (b.lanes.length > 1) {
        ctx.fillText('tid ' + b.tid, 14, y + TH_PAD + LH / 2);
        ctx.fillStyle = '#7a8594';
        ctx.fillText(count, 14, y + TH_PAD + LH * 1.5, GUTTER - 20);
      } else { /* one lane: one line, or the count would run into the next row's label */
        const tid = 'tid ' + b.tid;
        ctx.fillText(tid, 14, y + TH_PAD + LH / 2);
        ctx.fillStyle = '#7a8594';
        const w = ctx.measureText(tid + '  ').width;
        ctx.fillText('· ' + count, 14 + w, y + TH_PAD + LH / 2, GUTTER - 20 - w);
      }
      ctx.strokeStyle = '#e6e9ee';
      ctx.beginPath();
      ctx.moveTo(0, y + b.h - 0.5);
      ctx.lineTo(cssW, y + b.h - 0.5);
      ctx.stroke();
    }
  }
  ctx.restore();
  ctx.strokeStyle = '#c9ced6';
  ctx.beginPath();
  ctx.moveTo(GUTTER - 0.5, AXIS_H);
  ctx.lineTo(GUTTER - 0.5, cssH);
  ctx.stroke();
}

/* ticks about every 110 px; labels since the trace start, or from an anchor when that gets long */
function axisTicks() {
  const step = niceStep((v1 - v0) * 110 / plotW);
  const list = [];
  for (let t = Math.ceil(v0 / step) * step; t <= v1 && list.length < 200; t += step) list.push(t);
  /* in the unit of the times shown (82.1 ms rather than 82100 µs), as precise as the step */
  const u = unitFor(Math.max(Math.abs(v0), Math.abs(v1), step)), dec = decimalsFor(step, u[0]);
  const abs = (t) => (t / u[0]).toFixed(dec) + ' ' + u[1];
  let anchor = null;
  if (list.length && abs(list[list.length - 1]).length > 10) anchor = list[0];
  const us = unitFor(step), ds = decimalsFor(step, us[0]);
  return { list, step, label: anchor === null ? abs : (t) => '+' + ((t - anchor) / us[0]).toFixed(ds) + ' ' + us[1], anchor };
}

function drawAxis(tk) {
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, cssW, AXIS_H);
  ctx.strokeStyle = '#8b95a3';
  ctx.fillStyle = '#1d2330';
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'alphabetic';
  ctx.beginPath();
  ctx.moveTo(GUTTER, AXIS_H - 0.5);
  ctx.lineTo(cssW, AXIS_H - 0.5);
  for (const t of tk.list) {
    const x = Math.round(xOf(t)) + 0.5;
    ctx.moveTo(x, AXIS_H - 7);
    ctx.lineTo(x, AXIS_H);
  }
  ctx.stroke();
  ctx.textAlign = 'center';
  for (const t of tk.list) {
    const x = xOf(t);
    if (x < GUTTER + 20 || x > cssW - 20) continue;
    ctx.fillText(tk.label(t), x, AXIS_H - 11);
  }
  ctx.textAlign = 'left';
  ctx.fillStyle = '#5f6b7a';
  ctx.fillText(tk.anchor === null ? 'time since trace start' : 'from ' + fmtTime(tk.anchor, tk.step), 6, AXIS_H - 11);
}

function updateRange() {
  const el = $('tl-range');
  if (!N) { el.textContent = ''; return; }
  el.textContent = fmtTime(v0, v1 - v0) + ' – ' + fmtTime(v1, v1 - v0) + '  (' + fmtDur(v1 - v0) + ' shown of ' + fmtDur(T1 - T0) + ')';
  el.dataset.t0 = v0.toFixed(1);
  el.dataset.t1 = v1.toFixed(1);
  $('tl-zoom-out').disabled = v1 - v0 >= (T1 - T0 + 2 * PAD) * 0.999;
}

function setView(a, b) {
  const full = T1 - T0 + 2 * PAD;
  let span = Math.max(20, Math.min(b - a, full));
  if (!(span > 0)) span = full;
  let c = (a + b) / 2;
  a = c - span / 2;
  b = c + span / 2;
  if (a < T0 - PAD) { b += T0 - PAD - a; a = T0 - PAD; }
  if (b > T1 + PAD) { a -= b - (T1 + PAD); b = T1 + PAD; }
  v0 = Math.max(a, T0 - PAD);
  v1 = b;
  requestDraw();
}
function zoomAt(t, f) { setView(t - (t - v0) * f, t + (v1 - t) * f); }

/* what is under a point of the canvas (CSS px): an activity, or a merged column */
function hitAt(cx, cy) {
  if (cy < AXIS_H || cx < GUTTER || cx >= cssW) return null;
  const y = cy - AXIS_H + scroller.scrollTop;
  const rows = TL.rows;
  let lo = 0, hi = rows.length - 1, r = null;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (rows[mid].y + rows[mid].h <= y) lo = mid + 1;
    else if (rows[mid].y > y) hi = mid - 1;
    else { r = rows[mid]; break; }
  }
  if (!r) return null;
  const l = Math.floor((y - r.y - TH_PAD) / LH);
  if (l < 0 || l >= r.lanes.length) return null;
  const L = r.lanes[l], t = tOf(cx);
  const col = Math.floor(cx - GUTTER);
  /* a drawn bar under the pointer (the shortest when bars overlap) */
  let best = -1;
  for (let i = lowerBound(L.me, L.n, t); i < L.n && L.st[i] <= t; i++) {
    if (L.en[i] < t || (L.en[i] - L.st[i]) * kx < MINW) continue;
    if (best < 0 || L.en[i] - L.st[i] < L.en[best] - L.st[best]) best = i;
  }
  if (best >= 0) return { row: L.act[best], thread: r };
  /* else the merged column there (or next to it) */
  for (const dc of [0, -1, 1]) {
    const c = col + dc, a = v0 + c / kx, b = v0 + (c + 1) / kx;
    const found = [];
    for (let i = lowerBound(L.me, L.n, a); i < L.n && L.st[i] < b; i++) {
      if ((L.en[i] - L.st[i]) * kx >= MINW || L.st[i] < a) continue;
      found.push(L.act[i]);
    }
    if (found.length === 1) return { row: found[0], thread: r };
    if (found.length > 1) return { merged: found, t0: a, t1: b, thread: r };
  }
  return null;
}

/* where an activity's time went: CPU (its samples), blocked (its waits), queued (its transfers,
 * Send to Receive); null when the trace says none of it */
function splitOf(r) {
  let queued = 0;
  for (let j = A.xOff[r]; j < A.xOff[r + 1]; j++) if (A.xFrom[j] >= 0 && A.xRecv[j] > A.xSend[j]) queued += A.xRecv[j] - A.xSend[j];
  const cpu = A.cpu.get(r) || 0, blocked = A.blk.get(r) || 0;
  return cpu || blocked || queued ? { cpu, blocked, queued } : null;
}
const splitText = (sp) => 'cpu ' + fmtDur(sp.cpu) + ', blocked ' + fmtDur(sp.blocked) + ', queued ' + fmtDur(sp.queued);

function describe(r) {
  const sp = splitOf(r);
  const ths = threadsOf(r).map(tidOf);
  return nameOf(A.nm[r]) + ' ' + pathOf(r) + '  (pid ' + pidOf(r) + ')\n' +
    'start ' + fmtTime(A.st[r], Math.max(A.dur[r], 1000)) + ', ' + (isOpen(r) ? 'never stopped (open ' + fmtDur(A.dur[r]) + ' at the end)' : 'duration ' + fmtDur(A.dur[r])) + '\n' +
    'thread' + (ths.length > 1 ? 's ' : ' ') + ths.join(', ') + (A.xOff[r + 1] > A.xOff[r] ? ', ' + (A.xOff[r + 1] - A.xOff[r]) + ' transfer(s)' : '') +
    (A.link.has(r) ? '\nstarted from ' + A.link.get(r) : '') + (sp ? '\n' + splitText(sp) : '') + '\nclick: its waterfall';
}

const tip = $('tip');
function showTip(text, ex, ey) {
  tip.textContent = text;
  tip.hidden = false;
  const w = tip.offsetWidth, h = tip.offsetHeight;
  tip.style.left = Math.min(ex + 14, window.innerWidth - w - 6) + 'px';
  tip.style.top = (ey + 16 + h > window.innerHeight ? ey - h - 10 : ey + 16) + 'px';
}
const hideTip = () => { tip.hidden = true; };

let drag = null;
cv.addEventListener('mousedown', (e) => {
  if (e.button !== 0) return;
  const rc = cv.getBoundingClientRect();
  drag = { x: e.clientX, y: e.clientY, cx: e.clientX - rc.left, cy: e.clientY - rc.top, v0, v1, moved: false };
  cv.classList.add('dragging');
  cv.focus();
  e.preventDefault();
});
window.addEventListener('mousemove', (e) => {
  if (drag) {
    const dx = e.clientX - drag.x;
    if (Math.abs(dx) > 3 || Math.abs(e.clientY - drag.y) > 3) drag.moved = true;
    if (drag.moved) {
      const dt = dx * (drag.v1 - drag.v0) / plotW;
      setView(drag.v0 - dt, drag.v1 - dt);
    }
    hideTip();
    return;
  }
  if (e.target !== cv) return;
  const rc = cv.getBoundingClientRect();
  const h = hitAt(e.clientX - rc.left, e.clientY - rc.top);
  if (!h) { hideTip(); return; }
  if (h.row !== undefined) showTip(describe(h.row), e.clientX, e.clientY);
  else {
    const by = new Map();
    for (const r of h.merged) by.set(A.nm[r], (by.get(A.nm[r]) || 0) + 1);
    const list = [...by.entries()].sort((a, b) => b[1] - a[1]).slice(0, 6).map(([k, c]) => nameOf(k) + ' ' + fmtInt(c)).join(', ');
    showTip(fmtInt(h.merged.length) + ' activities start in this pixel column (' + fmtTime(h.t0, h.t1 - h.t0) + ' – ' + fmtTime(h.t1, h.t1 - h.t0) + '):\n' + list + '\nclick to zoom in', e.clientX, e.clientY);
  }
});
window.addEventListener('mouseup', (e) => {
  if (!drag) return;
  const d = drag;
  drag = null;
  cv.classList.remove('dragging');
  if (d.moved) return;
  const h = hitAt(d.cx, d.cy);
  if (!h) return;
  if (h.row !== undefined) openWaterfall(h.row, true);
  else zoomAt((h.t0 + h.t1) / 2, 1 / 8);
});
cv.addEventListener('mouseleave', hideTip);
cv.addEventListener('wheel', (e) => {
  e.preventDefault();
  const rc = cv.getBoundingClientRect();
  const x = e.clientX - rc.left;
  if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
    const dt = e.deltaX * (v1 - v0) / plotW;
    setView(v0 + dt, v1 + dt);
    return;
  }
  const dy = e.deltaMode === 1 ? e.deltaY * 33 : e.deltaMode === 2 ? e.deltaY * 400 : e.deltaY;
  zoomAt(x >= GUTTER ? tOf(x) : (v0 + v1) / 2, Math.exp(dy * 0.002));
}, { passive: false });
cv.addEventListener('keydown', (e) => {
  const span = v1 - v0, c = (v0 + v1) / 2;
  if (e.key === '+' || e.key === '=') zoomAt(c, 0.5);
  else if (e.key === '-' || e.key === '_') zoomAt(c, 2);
  else if (e.key === '0') setView(T0 - PAD, T1 + PAD);
  else if (e.key === 'ArrowLeft') setView(v0 - span * 0.15, v1 - span * 0.15);
  else if (e.key === 'ArrowRight') setView(v0 + span * 0.15, v1 + span * 0.15);
  else return;
  e.preventDefault();
});
$('tl-zoom-in').addEventListener('click', () => zoomAt((v0 + v1) / 2, 0.5));
$('tl-zoom-out').addEventListener('click', () => zoomAt((v0 + v1) / 2, 2));
$('tl-reset').addEventListener('click', () => setView(T0 - PAD, T1 + PAD));
scroller.addEventListener('scroll', requestDraw);
window.addEventListener('resize', () => { sizeCanvas(); requestDraw(); });

/* the names, their colours and counts; a click searches for that name */
(function legend() {
  const lg = $('tl-legend');
  lg.hidden = !N;
  htmlEl('span', {}, 'Colours:', lg);
  for (const k of nameOrder) {
    const c = htmlEl('span', { class: 'chip', 'data-name': nameOf(k), 'data-count': NAMES[k].count, title: 'search for ' + nameOf(k) + ' alone' }, null, lg);
    htmlEl('span', { class: 'sw', style: 'background:' + COLOR[k] }, null, c);
    c.appendChild(document.createTextNode(nameOf(k) + ' (' + fmtInt(NAMES[k].count) + ')'));
    c.addEventListener('click', () => setQuery('"' + nameOf(k) + '"'));
  }
  const x = htmlEl('span', {}, null, lg);
  x.innerHTML = '<span class="sw" style="background:#6b7785"></span>several names in one pixel column';
  if (TL.xSendSorted.length) {
    const a = htmlEl('span', {}, null, lg);
    a.innerHTML = '<span class="sw" style="background:#d9480f"></span>transfer between threads (' + fmtInt(TL.xSendSorted.length) + ')';
  }
})();

/* ---------------- search ---------------- */

const searchBox = $('search'), searchCount = $('search-count');
function setQuery(q) {
  searchBox.value = q;
  applyQuery();
}
function applyQuery() {
  let q = searchBox.value.trim();
  exact = q.length >= 2 && q[0] === '"' && q[q.length - 1] === '"';
  if (exact) q = q.slice(1, -1);
  query = exact ? q : q.toLowerCase();
  matchCount = 0;
  for (let k = 0; k < NN; k++) {
    const n = nameOf(k);
    matchSlot[k] = query && (exact ? n === query : n.toLowerCase().includes(query)) ? 1 : 0;
    if (!query || matchSlot[k]) matchCount += NAMES[k].count;
  }
  if (!query) matchCount = N;
  searchCount.textContent = query ? fmtInt(matchCount) + ' of ' + fmtInt(N) + ' activities match' : fmtInt(N) + ' activities';
  searchCount.className = query ? 'hit' : '';
  searchCount.dataset.query = searchBox.value.trim();
  searchCount.dataset.count = String(matchCount);
  requestDraw();
  table.refilter();
  flames.forEach((f) => f.highlight());
}
let searchTimer = 0;
searchBox.addEventListener('input', () => { clearTimeout(searchTimer); searchTimer = setTimeout(applyQuery, 150); });
searchBox.addEventListener('keydown', (e) => { if (e.key === 'Enter') { clearTimeout(searchTimer); applyQuery(); } });
$('search-clear').addEventListener('click', () => setQuery(''));

/* ---------------- table ---------------- */

const table = (function () {
  const PAGE = 100;
  const tbody = document.querySelector('#acts tbody'), pager = $('tb-pager');
  let key = 'dur', dir = -1, page = 0, all = null, shown = null;
  function sortAll() {
    const idx = new Uint32Array(N);
    for (let i = 0; i < N; i++) idx[i] = i;
    const st = A.st, du = A.dur, nm = A.nm;
    if (key === 'dur') idx.sort((a, b) => dir * (du[a] - du[b]) || st[a] - st[b] || a - b);
    else if (key === 'start') idx.sort((a, b) => dir * (st[a] - st[b]) || a - b);
    else idx.sort((a, b) => dir * (nameRank[nm[a]] - nameRank[nm[b]]) || st[a] - st[b] || a - b);
    all = idx;
  }
  function refilter() {
    if (!all) sortAll();
    if (!query) shown = all;
    else {
      shown = new Uint32Array(matchCount);
      let k = 0;
      for (let i = 0; i < N && k < shown.length; i++) if (matchSlot[A.nm[all[i]]]) shown[k++] = all[i];
      shown = shown.subarray(0, k);
    }
    page = 0;
    render();
  }
  function threadCell(r) {
    const ths = threadsOf(r);
    if (ths.length === 1) return String(tidOf(ths[0]));
    if (A.stopThr[r] !== A.thr[r] && ths.length === 2) return tidOf(A.thr[r]) + ' → ' + tidOf(A.stopThr[r]);
    return tidOf(ths[0]) + ' +' + (ths.length - 1) + ' more';
  }
  function render() {
    const pages = Math.max(1, Math.ceil(shown.length / PAGE));
    if (page >= pages) page = pages - 1;
    const a = page * PAGE, b = Math.min(shown.length, a + PAGE);
    const html = [];
    for (let k = a; k < b; k++) {
      const r = shown[k], nm = A.nm[r];
      html.push('<tr data-row="' + r + '" data-dur="' + A.dur[r] + '"' + (r === selRow ? ' class="sel"' : '') + '><td><span class="sw" style="background:' +
        COLOR[nm] + '"></span>' + esc(nameOf(nm)) + '</td><td class="path">' + esc(pathOf(r)) + '</td><td>' + pidOf(r) +
        '</td><td>' + threadCell(r) + '</td><td class="num">' + fmtMs(A.st[r]) + '</td><td class="num">' + fmtDur(A.dur[r]) +
        (isOpen(r) ? ' <span class="open">never stopped</span>' : '') + '</td></tr>');
    }
    if (!shown.length) html.push('<tr><td colspan="6" class="empty">' + (N ? 'No activity matches the search.' : 'No activity in this trace.') + '</td></tr>');
    tbody.innerHTML = html.join('');
    $("acts-box").scrollTop = 0;
    pager.innerHTML = '';
    const btn = (label, to, title) => {
      const e = htmlEl('button', { type: 'button', title }, label, pager);
      e.disabled = to < 0 || to >= pages || to === page;
      e.addEventListener('click', () => { page = to; render(); });
      return e;
    };
    btn('« First', 0, 'first page').id = 'tb-first';
    btn('‹ Previous', page - 1, 'previous page').id = 'tb-prev';
    const info = htmlEl('span', { id: 'tb-info', 'data-page': page, 'data-pages': pages, 'data-rows': shown.length },
      'Page ' + fmtInt(page + 1) + ' of ' + fmtInt(pages) + ' · rows ' + fmtInt(shown.length ? a + 1 : 0) + '–' + fmtInt(b) + ' of ' + fmtInt(shown.length) + (query ? ' matching' : ''), pager);
    info.style.margin = '0 6px';
    btn('Next ›', page + 1, 'next page').id = 'tb-next';
    btn('Last »', pages - 1, 'last page').id = 'tb-last';
    const sorted = { dur: 'duration', start: 'start', name: 'name' }[key];
    htmlEl('span', { class: 'sep' }, null, pager);
    htmlEl('span', { id: 'tb-sort', 'data-key': key, 'data-dir': dir > 0 ? 'asc' : 'desc' }, 'sorted by ' + sorted + (dir > 0 ? ', ascending' : ', descending') + ' (click a column title to change)', pager);
    document.querySelectorAll('#acts th[data-sort]').forEach((th) => {
      th.querySelector('.dir').textContent = th.dataset.sort === key ? (dir > 0 ? '▲' : '▼') : '';
    });
  }
  document.querySelectorAll('#acts th[data-sort]').forEach((th) => th.addEventListener('click', () => {
    const k = th.dataset.sort;
    if (k === key) dir = -dir;
    else { key = k; dir = k === 'dur' ? -1 : 1; }
    sortAll();
    refilter();
  }));
  tbody.addEventListener('click', (e) => {
    const tr = e.target.closest('tr[data-row]');
    if (tr) openWaterfall(Number(tr.dataset.row), true);
  });
  return { refilter, render, markSelected: () => { if (shown) render(); } };
})();

/* ---------------- waterfall ---------------- */

const WF_MAX = 400;
const wfDefs = svgEl('svg', { width: 0, height: 0, style: 'position:absolute' }, document.body);
(function () {
  const d = svgEl('defs', {}, wfDefs);
  const m = svgEl('marker', { id: 'wf-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, d);
  svgEl('path', { d: 'M0,0L10,5L0,10z', fill: '#d9480f' }, m);
})();
const THREAD_TONES = ['#5c7cfa', '#20c997', '#f59f00', '#be4bdb', '#15aabf', '#94d82d', '#ff6b6b', '#845ef7'];

function openWaterfall(root, scroll) {
  selRow = root;
  const sec = $('wf-sec');
  sec.hidden = false;
  /* the subtree in start order, depth first */
  const rows = [], depth = [];
  let total = 0;
  const stack = [[root, 0]];
  while (stack.length) {
    const [r, d] = stack.pop();
    total++;
    if (rows.length < WF_MAX) { rows.push(r); depth.push(d); }
    const k = kidsOf(r);
    for (let i = k.length - 1; i >= 0; i--) stack.push([k[i], d + 1]);
  }
  const t0 = A.st[root];
  let t1 = A.en[root];
  const procs = new Set(), threads = new Set();
  for (const r of rows) {
    t1 = Math.max(t1, A.en[r]);
    for (let j = A.xOff[r]; j < A.xOff[r + 1]; j++) t1 = Math.max(t1, A.xRecv[j]);
    procs.add(pidOf(r));
    threadsOf(r).forEach((t) => threads.add(t));
  }
  const span = Math.max(t1 - t0, 1);
  const head = $('wf-head');
  head.innerHTML = '';
  const h = htmlEl('div', { id: 'wf-title', 'data-row': root, 'data-name': nameOf(A.nm[root]), 'data-path': pathOf(root), 'data-pid': pidOf(root) }, null, head);
  h.innerHTML = '<b>' + esc(nameOf(A.nm[root])) + '</b> <code>' + esc(pathOf(root)) + '</code> in pid ' + pidOf(root) + ': ' +
    (isOpen(root) ? 'never stopped (open ' + fmtDur(A.dur[root]) + ' at the end)' : fmtDur(A.dur[root])) + ', ' + fmtInt(total) +
    ' activit' + (total === 1 ? 'y' : 'ies') + ' on ' + threads.size + ' thread' + (threads.size === 1 ? '' : 's') + ' in ' + procs.size +
    ' process' + (procs.size === 1 ? '' : 'es') + '. Bars on a common time axis from its start; below a bar that crossed threads, one line per thread it ran on, ' +
    'red arrows for its transfers (Send → Receive); after each bar its duration and, where the trace says it, its CPU (from CPU samples), blocked (waits) and queued (transfers) time. Click a row for its stacks and events. ';
  const close = htmlEl('button', { type: 'button' }, 'Close', h);
  close.addEventListener('click', () => { sec.hidden = true; selRow = -1; requestDraw(); table.markSelected(); });
  const show = htmlEl('button', { type: 'button', style: 'margin-left:6px' }, 'Show in timeline', h);
  show.addEventListener('click', () => { revealInTimeline(root); });

  const wf = $('wf');
  wf.innerHTML = '';
  const maxDepth = depth.reduce((a, b) => Math.max(a, b), 0);
  const labelW = Math.min(520, 250 + maxDepth * 14);
  wf.style.setProperty('--wf-label', labelW + 'px');
  const trackW = Math.max(360, wf.clientWidth - labelW - 150 - 4);
  const kk = (trackW - 90) / span;
  const X = (t) => 4 + (t - t0) * kk;
  /* axis */
  const ax = htmlEl('div', { class: 'wf-axis' }, null, wf);
  htmlEl('div', {}, 'activity (indented under its parent)', ax);
  htmlEl('div', {}, 'thread(s)', ax);
  const as = svgEl('svg', { width: trackW, height: 24, class: 'axis' }, htmlEl('div', { class: 'wf-track' }, null, ax));
  const step = niceStep(span * 90 / (trackW - 90));
  const u = unitFor(span), dec = decimalsFor(step, u[0]);
  svgEl('line', { x1: 4, x2: trackW - 86, y1: 23.5, y2: 23.5 }, as);
  for (let t = 0; t <= span + 1e-9 && t / step < 400; t += step) {
    const x = X(t0 + t);
    svgEl('line', { x1: x, x2: x, y1: 18, y2: 24 }, as);
    svgEl('text', { x, y: 14, 'text-anchor': t === 0 ? 'start' : 'middle' }, as).textContent = (t === 0 ? '0' : '+' + (t / u[0]).toFixed(dec)) + ' ' + u[1];
  }
  rows.forEach((r, i) => {
    const ths = threadsOf(r);
    const multi = ths.length > 1;
    const sp = splitOf(r);
    const tr = htmlEl('div', {
      'data-cpu': sp ? sp.cpu : 0, 'data-blocked': sp ? sp.blocked : 0, 'data-queued': sp ? sp.queued : 0,
      class: 'wf-row' + (r === root ? ' sel' : ''), 'data-row': r, 'data-name': nameOf(A.nm[r]), 'data-path': pathOf(r), 'data-pid': pidOf(r),
      'data-depth': depth[i], 'data-start': A.st[r], 'data-dur': A.dur[r], 'data-open': isOpen(r) ? 1 : 0,
      'data-threads': ths.map(tidOf).join(','),
      'data-xfers': Array.from({ length: A.xOff[r + 1] - A.xOff[r] }, (_, q) => {
        const j = A.xOff[r] + q;
        return (A.xFrom[j] >= 0 ? tidOf(A.xFrom[j]) : '?') + '>' + tidOf(A.xTo[j]) + '@' + A.xSend[j] + '-' + A.xRecv[j];
      }).join(','),
    }, null, wf);
    const lab = htmlEl('div', { class: 'wf-label', style: 'padding-left:' + (6 + depth[i] * 14) + 'px', title: nameOf(A.nm[r]) + ' ' + pathOf(r) }, null, tr);
    lab.innerHTML = '<span class="sw" style="background:' + COLOR[A.nm[r]] + '"></span>' + esc(nameOf(A.nm[r])) + '<span class="path">' + esc(pathOf(r)) + '</span>' +
      (i === 0 || pidOf(r) !== pidOf(A.parent[r]) ? '<span class="pid">pid ' + pidOf(r) + '</span>' : '');
    const tc = htmlEl('div', { class: 'wf-thread', title: ths.map((t) => 'tid ' + tidOf(t)).join(', ') }, null, tr);
    htmlEl('div', { class: 'first' }, multi && A.stopThr[r] !== A.thr[r] && ths.length === 2
      ? 'tid ' + tidOf(A.thr[r]) + ' → ' + tidOf(A.stopThr[r]) : 'tid ' + ths.map(tidOf).join(', '), tc);
    /* beside each line drawn under the bar, its thread */
    if (multi) ths.forEach((t, j) => htmlEl('div', { class: 'line', style: 'color:' + THREAD_TONES[j % THREAD_TONES.length] }, '▬ on tid ' + tidOf(t), tc));
    const rh = multi ? 22 + ths.length * 10 : 22;
    const s = svgEl('svg', { width: trackW, height: rh }, htmlEl('div', { class: 'wf-track' }, null, tr));
    const xa = X(A.st[r]), xb = Math.max(X(A.en[r]), xa + 1.5);
    const bar = svgEl('rect', { class: 'wf-bar', x: xa, y: 4, width: xb - xa, height: 13, rx: 2, fill: COLOR[A.nm[r]], 'fill-opacity': isOpen(r) ? 0.5 : 1, stroke: 'rgba(0,0,0,.3)' }, s);
    svgEl('title', {}, bar).textContent = describe(r).replace(/\nclick.*$/, '');
    const lbl = svgEl('text', { class: 'wf-dur', x: xb + 4, y: 14.5 }, s);
    lbl.textContent = (isOpen(r) ? 'never stopped, ' : '') + fmtDur(A.dur[r]) + (sp ? ' (' + splitText(sp) + ')' : '');
    if (multi) {
      const yOf = (t) => 22 + ths.indexOf(t) * 10;
      const seg = (t, a, b) => {
        const y = yOf(t), x0 = X(a), x1 = Math.max(X(b), x0 + 1.5);
        const tone = THREAD_TONES[ths.indexOf(t) % THREAD_TONES.length];
        const rr = svgEl('rect', { class: 'wf-visit', 'data-tid': tidOf(t), x: x0, y, width: x1 - x0, height: 6, fill: tone }, s);
        svgEl('title', {}, rr).textContent = 'on tid ' + tidOf(t) + ' from +' + fmtDur(a - t0) + ' to +' + fmtDur(b - t0);
      };
      seg(A.thr[r], A.st[r], A.end0[r]);
      for (let j = A.vOff[r]; j < A.vOff[r + 1]; j++) seg(A.vThr[j], A.vFrom[j], A.vTo[j]);
      for (let j = A.xOff[r]; j < A.xOff[r + 1]; j++) {
        const y2 = yOf(A.xTo[j]) + 3, x2 = X(A.xRecv[j]);
        if (A.xFrom[j] >= 0 && ths.includes(A.xFrom[j])) {
          const ln = svgEl('line', { class: 'wf-xfer', x1: X(A.xSend[j]), y1: yOf(A.xFrom[j]) + 3, x2, y2, stroke: '#d9480f', 'stroke-width': 1.4, 'marker-end': 'url(#wf-arrow)' }, s);
          svgEl('title', {}, ln).textContent = 'transfer tid ' + tidOf(A.xFrom[j]) + ' → tid ' + tidOf(A.xTo[j]) + ': sent at +' + fmtDur(A.xSend[j] - t0) + ', received at +' + fmtDur(A.xRecv[j] - t0) + ' (' + fmtDur(A.xRecv[j] - A.xSend[j]) + ' later)';
        } else {
          svgEl('circle', { class: 'wf-xfer', cx: x2, cy: y2, r: 3, fill: '#d9480f' }, s);
        }
      }
    }
    tr.addEventListener('click', () => {
      wf.querySelectorAll('.wf-row.sel').forEach((e) => e.classList.remove('sel'));
      tr.classList.add('sel');
      showDetail(r);
    });
  });
  if (total > rows.length) {
    htmlEl('div', { class: 'wf-more', id: 'wf-more' }, fmtInt(total - rows.length) + ' more activities of this subtree are not shown: open one of the activities above to see its own subtree.', wf);
  }
  showDetail(root);
  requestDraw();
  table.markSelected();
  if (scroll) sec.scrollIntoView({ block: 'start' });
}

function frameList(stackRef, parent) {
  const fr = D.stacks[stackRef - 1] || [];
  const ol = htmlEl('ol', {}, null, parent);
  for (const f of fr) htmlEl('li', {}, S[f], ol);
  return ol;
}

function showDetail(r) {
  const box = $('wf-detail');
  box.innerHTML = '';
  box.dataset.row = r;
  const left = htmlEl('div', {}, null, box), right = htmlEl('div', {}, null, box);
  htmlEl('h3', {}, nameOf(A.nm[r]) + ' ' + pathOf(r), left);
  const dl = htmlEl('dl', {}, null, left);
  const item = (k, v) => { htmlEl('dt', {}, k, dl); htmlEl('dd', {}, v, dl); };
  const p = PROCS.get(pidOf(r));
  item('Process', 'pid ' + pidOf(r) + (p && p.cmd ? ': ' + p.cmd : ''));
  item('Start', fmtMs(A.st[r]) + ' ms after the trace start, on tid ' + tidOf(A.thr[r]));
  item(isOpen(r) ? 'Never stopped' : 'Duration', isOpen(r) ? 'open for ' + fmtDur(A.dur[r]) + ' at the end of the trace' : fmtDur(A.dur[r]) + (A.stopThr[r] !== A.thr[r] ? ', stopped on tid ' + tidOf(A.stopThr[r]) : ''));
  item('Threads', threadsOf(r).map((t) => 'tid ' + tidOf(t)).join(', '));
  const xs = [];
  for (let j = A.xOff[r]; j < A.xOff[r + 1]; j++) {
    xs.push((A.xFrom[j] >= 0 ? 'tid ' + tidOf(A.xFrom[j]) : 'an unseen sender') + ' → tid ' + tidOf(A.xTo[j]) + ' at +' + fmtDur(A.xRecv[j] - A.st[r]) + ' (' + fmtDur(A.xRecv[j] - A.xSend[j]) + ' after the Send)');
  }
  if (A.xDrop.has(r)) xs.push(fmtInt(A.xDrop.get(r)) + ' more beyond the cap');
  item('Transfers', xs.length ? xs.join('; ') : 'none');
  if (A.parent[r] >= 0) item('Parent', nameOf(A.nm[A.parent[r]]) + ' ' + pathOf(A.parent[r]) + (pidOf(A.parent[r]) !== pidOf(r) ? ' in pid ' + pidOf(A.parent[r]) : ''));
  if (A.link.has(r)) item('Started from', A.link.get(r) + ' (not in these files)');
  item('Children', fmtInt(A.kOff[r + 1] - A.kOff[r]));
  htmlEl('h3', {}, 'Stack of its Start', right);
  if (A.stack[r]) frameList(A.stack[r], right).id = 'wf-start-stack';
  else htmlEl('p', { class: 'empty' }, 'The Start carries no stack (ACTTRACE_STACKS, or a config\'s stacks = none).', right);
  const mk = MARKS.list.subarray(MARKS.off[r], MARKS.off[r + 1]);
  htmlEl('h3', {}, 'Events inside it (' + mk.length + ')', right);
  if (!mk.length) htmlEl('p', { class: 'empty' }, 'None besides its Start and Stop' + (META.marks_cut ? ' (or past the listed events: see the summary)' : '') + '.', right);
  for (const i of mk) {
    const ev = htmlEl('div', { class: 'ev' }, null, right);
    const text = '+' + fmtDur(MARKS.time(i) - A.st[r]) + '  ' + MARKS.name(i) + (MARKS.text(i) ? '  ' + MARKS.text(i) : '');
    if (MARKS.stack(i)) {
      const det = htmlEl('details', {}, null, ev);
      htmlEl('summary', {}, text + '  (stack of ' + (D.stacks[MARKS.stack(i) - 1] || []).length + ' frames)', det);
      frameList(MARKS.stack(i), det);
    } else {
      ev.textContent = text;
    }
  }
}

function revealInTimeline(r) {
  const pad = Math.max(A.dur[r] * 0.25, 500);
  setView(A.st[r] - pad, A.en[r] + pad);
  const th = TL.threadRow[A.thr[r]];
  const ly = th.y + TH_PAD + TL.laneOfRow[r] * LH;
  if (ly < scroller.scrollTop || ly + LH > scroller.scrollTop + cssH - AXIS_H) scroller.scrollTop = Math.max(0, ly - (cssH - AXIS_H) / 2);
  draw();
  $('timeline-sec').scrollIntoView({ block: 'start' });
}

/* ---------------- histograms ---------------- */

function histograms() {
  const box = $('histograms');
  const lists = NAMES.map((n) => new Float64Array(n.count - n.never));
  const fill = new Uint32Array(NN);
  for (let i = 0; i < N; i++) if (!isOpen(i)) lists[A.nm[i]][fill[A.nm[i]]++] = A.dur[i];
  if (!NN) htmlEl('p', { class: 'empty' }, 'No activity in this trace.', box);
  for (const k of nameOrder) {
    const nm = NAMES[k], v = lists[k];
    const d = htmlEl('div', { class: 'hist', 'data-name': nameOf(k), 'data-count': nm.count }, null, box);
    htmlEl('h3', {}, nameOf(k), d);
    const W = 540, H = 220, ml = 50, mr = 16, mt = 20, mb = 42, pw = W - ml - mr, ph = H - mt - mb;
    const s = svgEl('svg', { width: W, height: H }, d);
    let lo = Infinity, hi = -Infinity;
    for (const x of v) { if (x < lo) lo = x; if (x > hi) hi = x; }
    if (!v.length) { lo = 0; hi = 1; }
    if (hi <= lo) { const m = Math.max(hi * 0.05, 1); lo -= m; hi += m; }
    /* a long tail (longest over 30 times the shortest): bins and axis on a log scale */
    const log = lo > 0 && hi / lo > 30;
    const f = log ? Math.log : (x) => x, flo = f(lo), fhi = f(hi);
    const nb = 30, bw = (fhi - flo) / nb, counts = new Array(nb).fill(0);
    for (const x of v) counts[Math.max(0, Math.min(nb - 1, Math.floor((f(x) - flo) / bw)))]++;
    const cmax = Math.max(1, ...counts);
    const X = (x) => ml + (f(x) - flo) / (fhi - flo) * pw;
    const ystep = Math.max(1, niceStep(cmax / 4)), ytop = Math.ceil(cmax / ystep) * ystep, Y = (c) => mt + ph - c / ytop * ph;
    const g = svgEl('g', { class: 'grid' }, s), ax = svgEl('g', { class: 'axis' }, s);
    for (let c = 0; c <= ytop; c += ystep) {
      svgEl('line', { x1: ml, x2: ml + pw, y1: Y(c), y2: Y(c) }, g);
      svgEl('line', { x1: ml - 4, x2: ml, y1: Y(c), y2: Y(c) }, ax);
      svgEl('text', { x: ml - 7, y: Y(c) + 4, 'text-anchor': 'end' }, ax).textContent = fmtCount(c);
    }
    const inv = log ? Math.exp : (x) => x;
    counts.forEach((c, b) => {
      if (!c) return;
      const a = flo + b * bw;
      const r = svgEl('rect', { class: 'hbar', x: ml + b * pw / nb + 0.5, y: Y(c), width: Math.max(1, pw / nb - 1), height: mt + ph - Y(c) }, s);
      svgEl('title', {}, r).textContent = fmtInt(c) + ' activities from ' + fmtDur(inv(a)) + ' to ' + fmtDur(inv(a + bw));
    });
    svgEl('line', { x1: ml, x2: ml + pw, y1: mt + ph + 0.5, y2: mt + ph + 0.5 }, ax);
    svgEl('line', { x1: ml - 0.5, x2: ml - 0.5, y1: mt, y2: mt + ph }, ax);
    const tick = (x, label) => {
      svgEl('line', { x1: X(x), x2: X(x), y1: mt + ph, y2: mt + ph + 5 }, ax);
      svgEl('text', { x: X(x), y: mt + ph + 17, 'text-anchor': 'middle' }, ax).textContent = label;
    };
    let unitText;
    if (log) {
      /* powers of ten, with 2 and 5 between them when there are few */
      const decades = Math.log10(hi) - Math.log10(lo);
      const mult = decades < 2.5 ? [1, 2, 5] : [1];
      for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
        for (const m of mult) {
          const x = m * Math.pow(10, e);
          if (x >= lo * 0.999 && x <= hi * 1.001) tick(x, shortDur(x));
        }
      }
      unitText = 'duration (log scale)';
    } else {
      const u = unitFor(hi), xstep = niceStep((hi - lo) / 5), xdec = decimalsFor(xstep, u[0]);
      for (let x = Math.ceil(lo / xstep) * xstep; x <= hi + xstep * 1e-6; x += xstep) tick(x, (x / u[0]).toFixed(xdec));
      unitText = 'duration (' + u[1] + ')';
    }
    svgEl('text', { x: ml + pw / 2, y: H - 6, 'text-anchor': 'middle', class: 'xunit' }, ax).textContent = unitText;
    svgEl('text', { x: 11, y: mt + ph / 2, 'text-anchor': 'middle', transform: 'rotate(-90 11 ' + (mt + ph / 2) + ')' }, ax).textContent = 'activities';
    const pcts = [['p50', nm.p50, '#2b8a3e'], ['p90', nm.p90, '#e67700'], ['p99', nm.p99, '#c92a2a']];
    if (v.length) {
      let lastX = -1e9, row = 0;
      for (const [lab, val, col] of pcts) {
        const x = X(Math.min(Math.max(val, lo), hi));
        svgEl('line', { class: 'pct', x1: x, x2: x, y1: mt - 2, y2: mt + ph, stroke: col }, s);
        row = x - lastX < 26 ? row + 1 : 0;
        lastX = x;
        svgEl('text', { x: x + 3, y: mt - 6 + row * 11, style: 'fill:' + col }, s).textContent = lab;
      }
    }
    const p = htmlEl('p', {}, null, d);
    p.innerHTML = fmtInt(nm.count) + (nm.count === 1 ? ' activity' : ' activities') + (v.length ? ': <span style="color:#2b8a3e">p50 ' + fmtDur(nm.p50) + '</span> · <span style="color:#e67700">p90 ' +
      fmtDur(nm.p90) + '</span> · <span style="color:#c92a2a">p99 ' + fmtDur(nm.p99) + '</span> · max ' + fmtDur(nm.max) : '') +
      (nm.never ? '; ' + fmtInt(nm.never) + ' never stopped (not in the histogram)' : '');
  }
}
/* 1 µs, 20 µs, 500 ms: a tick's duration without trailing zeros */
function shortDur(ns) {
  const u = unitFor(ns);
  return +(ns / u[0]).toPrecision(3) + ' ' + u[1];
}
function fmtCount(c) {
  return c >= 1e6 ? +(c / 1e6).toPrecision(3) + 'M' : c >= 1e3 ? +(c / 1e3).toPrecision(3) + 'k' : String(c);
}

/* ---------------- flame graphs ---------------- */

let flames = [];
function buildFlames() {
  const box = $('flames'), out = [];
  for (const k of nameOrder) {
    const nm = NAMES[k];
    if (!nm.flame.length) continue;
    const root = { name: nameOf(k), v: 0, kids: new Map(), parent: null, depth: 0 };
    let maxDepth = 0;
    for (const st of nm.flame) {
      const c = st[0];
      root.v += c;
      let node = root;
      for (let j = 2; j < st.length; j++) {
        let ch = node.kids.get(st[j]);
        if (!ch) { ch = { name: S[st[j]], v: 0, kids: new Map(), parent: node, depth: node.depth + 1 }; node.kids.set(st[j], ch); }
        ch.v += c;
        node = ch;
      }
      if (node.depth > maxDepth) maxDepth = node.depth;
    }
    const d = htmlEl('div', { class: 'flame', 'data-name': nameOf(k), 'data-total': root.v }, null, box);
    htmlEl('h3', {}, nameOf(k), d);
    const tools = htmlEl('div', { class: 'tools' }, null, d);
    const reset = htmlEl('button', { type: 'button', class: 'reset' }, 'Reset zoom', tools);
    const where = htmlEl('span', { class: 'where' }, null, tools);
    const legendP = htmlEl('p', {}, fmtInt(root.v) + ' events with a stack inside ' + nameOf(k) + ' activities; width: events, depth: calls (root on top).', d);
    legendP.style.marginBottom = '4px';
    const FH = 18;
    const svgBox = svgEl('svg', { height: (maxDepth + 1) * FH + 2 }, d);
    let focus = root;
    const f = {
      render(n) {
        focus = n;
        while (svgBox.firstChild) svgBox.removeChild(svgBox.firstChild);
        const W = Math.max(600, box.clientWidth - 4);
        svgBox.setAttribute('width', W);
        const chain = [];
        for (let p = n; p; p = p.parent) chain.unshift(p);
        const draw = (node, x, y, w, anc) => {
          const r = svgEl('rect', { class: 'frame' + (anc ? ' anc' : ''), 'data-frame': node.name, 'data-count': node.v, 'data-depth': node.depth, x, y, width: Math.max(0.5, w - 0.5), height: FH - 1, fill: 'hsl(' + (20 + (hashStr(node.name) % 40)) + ',' + (node === root ? 25 : 75) + '%,' + (58 + hashStr(node.name) % 12) + '%)' }, svgBox);
          svgEl('title', {}, r).textContent = node.name + '\n' + fmtInt(node.v) + ' events (' + (100 * node.v / root.v).toFixed(1) + '% of ' + root.name + ')' + (anc ? '\nclick to zoom out to it' : '\nclick to zoom in');
          r.addEventListener('click', () => f.render(node));
          if (w > 34) {
            const fit = Math.floor((w - 6) / 6.3);
            const t = svgEl('text', { x: x + 3, y: y + 12.5, 'pointer-events': 'none' }, svgBox);
            t.textContent = node.name.length > fit ? node.name.slice(0, Math.max(1, fit - 1)) + '…' : node.name;
          }
          if (match(node.name)) r.classList.add('hit');
        };
        chain.forEach((p, i) => { if (p !== n) draw(p, 0, i * FH, W, true); });
        const lay = (node, x, y, w) => {
          draw(node, x, y, w, false);
          let cx = x;
          const kids = [...node.kids.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
          for (const c of kids) {
            const cw = w * c.v / node.v;
            if (cw >= 0.5) lay(c, cx, y + FH, cw);
            cx += cw;
          }
        };
        lay(n, 0, (chain.length - 1) * FH, W);
        reset.disabled = n === root;
        where.textContent = n === root ? '' : 'zoomed into ' + n.name + ' (' + fmtInt(n.v) + ' of ' + fmtInt(root.v) + ' events)';
        d.dataset.focus = n.name;
      },
      highlight() { svgBox.querySelectorAll('rect.frame').forEach((r) => r.classList.toggle('hit', !!query && match(r.dataset.frame))); },
    };
    reset.addEventListener('click', () => f.render(root));
    f.render(root);
    out.push(f);
  }
  if (!out.length) htmlEl('p', { class: 'empty' }, 'No event inside an activity carries a stack in this trace.', box);
  function match(name) { return !!query && (exact ? name === query : name.toLowerCase().includes(query)); }
  return out;
}
function hashStr(s) {
  let h = 0;
  for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0;
  return h;
}

/* ---------------- start ---------------- */

/* the timeline first, so it shows while the rest is built */
sizeCanvas();
draw();
if (!N) {
  scroller.hidden = true;
  ['tl-zoom-in', 'tl-zoom-out', 'tl-reset'].forEach((id) => { $(id).disabled = true; });
  $('tl-range').textContent = '';
  scroller.insertAdjacentElement('afterend', htmlEl('p', { class: 'empty' }, 'No activity in this trace: no <Name>Start event with an ActivityId in these files.'));
}
const tFirstDraw = performance.now();
setTimeout(() => {
  histograms();
  flames = buildFlames();
  applyQuery();
  window.acttraceReport.timings.total = performance.now() - t00;
  document.body.setAttribute('data-rendered', '1');
}, 0);

/* read-outs for the browser tests (tests/web) */
window.acttraceReport = {
  timings: { decode: tDecoded - t00, layout: tLayout - tDecoded, firstDraw: tFirstDraw - t00, total: 0 },
  view: () => ({ t0: v0, t1: v1, plotLeft: GUTTER, plotWidth: plotW }),
  extent: () => ({ t0: T0, t1: T1 }),
  setView: (a, b) => { setView(a, b); draw(); },
  drawn: () => Object.assign({}, stats),
  lanes: () => TL.rows.map((r) => ({ pid: r.pid, tid: r.tid, lanes: r.lanes.length, slices: r.slices })),
  rowByPath: (path, pid) => { for (let i = 0; i < N; i++) if ((pid === undefined || pidOf(i) === pid) && pathOf(i) === path) return i; return -1; },
  row: (r) => ({ name: nameOf(A.nm[r]), path: pathOf(r), pid: pidOf(r), start: A.st[r], dur: A.dur[r], open: isOpen(r) }),
  /* the page coordinates of the middle of an activity's bar on its start thread, scrolled into view */
  locate: (r) => {
    const th = TL.threadRow[A.thr[r]];
    const ly = th.y + TH_PAD + TL.laneOfRow[r] * LH;
    if (ly < scroller.scrollTop || ly + LH > scroller.scrollTop + cssH - AXIS_H) { scroller.scrollTop = Math.max(0, ly - (cssH - AXIS_H) / 2); draw(); }
    const a = Math.max(A.st[r], v0), b = Math.min(A.end0[r], v1);
    if (b < a) return null;
    const rc = cv.getBoundingClientRect();
    return { x: rc.left + xOf((a + b) / 2), y: rc.top + yOfContent(ly) + (LH - 2) / 2, width: (b - a) * kx };
  },
  colorOf: (name) => { for (let k = 0; k < NN; k++) if (nameOf(k) === name) return hslToRgb(HUE[k], 62, 58); return null; },
};
})();
