/* lib.js: what the browser tests of `acttrace report` share. Debian's Chromium driven by
 * playwright-core (pinned in package-lock.json, installed by `npm ci`), a report page opened until
 * its script is done, screenshots with the number of colours they hold, and the output: one fact per
 * line ("key value..."), which the C tests (tests/integration/test_report_web.c,
 * tests/unit/test_tools_export.c) read and check against the command-line tools. No time limits:
 * a large report takes what it takes. */
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { chromium } = require('playwright-core');

function say(...parts) {
  console.log(parts.join(' '));
}

async function open(html) {
  const browser = await chromium.launch({ executablePath: process.env.AT_CHROMIUM || '/usr/bin/chromium' });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(0);
  page.on('pageerror', (e) => say('pageerror', JSON.stringify(e.message)));
  page.on('console', (m) => { if (m.type() === 'error') say('console-error', JSON.stringify(m.text())); });
  await page.goto('file://' + path.resolve(html), { timeout: 0 });
  await page.waitForSelector('body[data-rendered="1"]', { timeout: 0 });
  return { browser, page };
}

/* After an input: two animation frames, so the timeline has drawn what it scheduled. */
function settle(page) {
  return page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r()))));
}

/* The colours of a PNG (8-bit RGB or RGBA, not interlaced), sampled every other pixel and row. */
function pngColours(buf) {
  if (buf.readUInt32BE(0) !== 0x89504e47) throw new Error('not a PNG');
  let i = 8, w = 0, h = 0, type = 0;
  const idat = [];
  while (i < buf.length) {
    const n = buf.readUInt32BE(i), t = buf.toString('latin1', i + 4, i + 8);
    if (t === 'IHDR') {
      w = buf.readUInt32BE(i + 8); h = buf.readUInt32BE(i + 12); type = buf[i + 17];
      if (buf[i + 16] !== 8 || buf[i + 20] !== 0) throw new Error('unexpected PNG depth or interlace');
    }
    if (t === 'IDAT') idat.push(buf.subarray(i + 8, i + 8 + n));
    i += 12 + n;
  }
  const bpp = { 2: 3, 6: 4 }[type];
  if (!bpp) throw new Error('unexpected PNG colour type ' + type);
  const raw = zlib.inflateSync(Buffer.concat(idat)), stride = w * bpp;
  let prev = Buffer.alloc(stride);
  const colours = new Set();
  for (let y = 0; y < h; y++) {
    const f = raw[y * (stride + 1)], line = Buffer.from(raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1)));
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? line[x - bpp] : 0, up = prev[x], c = x >= bpp ? prev[x - bpp] : 0;
      let p = 0;
      if (f === 1) p = a;
      else if (f === 2) p = up;
      else if (f === 3) p = (a + up) >> 1;
      else if (f === 4) {
        const q = a + up - c, pa = Math.abs(q - a), pb = Math.abs(q - up), pc = Math.abs(q - c);
        p = pa <= pb && pa <= pc ? a : pb <= pc ? up : c;
      }
      line[x] = (line[x] + p) & 255;
    }
    prev = line;
    if (y % 2 === 0) for (let x = 0; x < w; x += 2) colours.add(line.readUIntBE(x * bpp, 3));
  }
  return { w, h, colours: colours.size };
}

/* A screenshot of the page, or of one element (selector), into dir; says "shot name w h colours". */
async function shot(page, dir, name, selector) {
  const file = path.join(dir, name + '.png');
  if (selector) await page.locator(selector).screenshot({ path: file });
  else await page.screenshot({ path: file });
  const p = pngColours(fs.readFileSync(file));
  say('shot', name, p.w, p.h, p.colours);
}

/* Runs the scenario, closes the browser, says "done" (or the error, exit 1). */
function run(fn) {
  let browser = null;
  (async () => {
    const [html, dir, ...args] = process.argv.slice(2);
    if (!html || !dir) throw new Error('usage: node ' + path.basename(process.argv[1]) + ' REPORT.html SHOTS-DIR [ARG...]');
    fs.mkdirSync(dir, { recursive: true });
    const o = await open(html);
    browser = o.browser;
    await fn(o.page, dir, args);
    await browser.close();
    say('done');
  })().catch(async (e) => {
    say('error', JSON.stringify(String(e && e.stack || e)));
    if (browser) await browser.close().catch(() => {});
    process.exit(1);
  });
}

module.exports = { say, open, settle, shot, run, pngColours };
