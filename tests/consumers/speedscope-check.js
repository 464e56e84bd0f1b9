#!/usr/bin/env node
// speedscope-check.js FILE: opens FILE in speedscope itself, as its `speedscope FILE` command does
// (the app of the npm package, dist/release/index.html, in Debian's Chromium driven by
// playwright-core), lets speedscope's own importer read it (its speedscope format, or its Chrome
// trace-event importer), then takes the profiles back out through the app's Export button: what
// speedscope made of the file, in its own words. Prints, one fact a line:
//   title TEXT                   the toolbar's title: the profile speedscope shows first
//   profiles N view I            profile count and the one in view (activeProfileIndex)
//   profile I NAME unit=U span=NS     each profile (span: endValue - startValue, in ns)
//   frame I NAME total=NS calls=N     per profile, each frame: the time it was on the stack
//                                     (outermost calls only, as speedscope's totals) and calls
// also "warning ..." for each warning speedscope logged while importing (frames it could not
// match), and "ok" last. Exits 1 with "FAIL: ..." when the page failed or the import did.
// A file that is not speedscope's format must also validate against speedscope's own schema
// (dist/release/file-format-schema.json) when it claims to be (its $schema): checked with ajv.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const file = process.argv[2];
if (!file) {
  console.error('usage: speedscope-check.js FILE');
  process.exit(2);
}
const release = path.join(path.dirname(require.resolve('speedscope/package.json')), 'dist', 'release');
const chromium = process.env.AT_CHROMIUM || '/usr/bin/chromium';

function fail(msg) {
  console.log(`FAIL: ${msg}`);
  process.exit(1);
}

// speedscope's own schema for files that say they are in its format
const raw = fs.readFileSync(file);
let doc;
try {
  doc = JSON.parse(raw.toString('utf8'));
} catch (e) {
  fail(`not JSON: ${e.message}`);
}
if (doc && doc.$schema === 'https://www.speedscope.app/file-format-schema.json') {
  const Ajv = require('ajv');
  const schema = JSON.parse(fs.readFileSync(path.join(release, 'file-format-schema.json'), 'utf8'));
  const ajv = new Ajv({allErrors: true, strict: false});
  const validate = ajv.compile(Object.assign({}, schema, {$ref: '#/definitions/FileFormat.File'}));
  if (!validate(doc)) fail(`speedscope's schema: ${ajv.errorsText(validate.errors).slice(0, 600)}`);
  console.log('schema: valid (speedscope file format)');
}

// Totals per frame from speedscope's exported (evented) profile: a frame's time on the stack,
// counting only its outermost calls, as speedscope's Sandwich view totals it.
function frameTotals(p, frames, scale) {
  const totals = new Map();
  const stack = [];
  const onStack = new Map();
  for (const ev of p.events) {
    const name = frames[ev.frame].name;
    if (ev.type === 'O') {
      stack.push({frame: ev.frame, at: ev.at});
      onStack.set(ev.frame, (onStack.get(ev.frame) || 0) + 1);
      const t = totals.get(name) || {total: 0, calls: 0, first: ev.frame};
      t.calls++;
      totals.set(name, t);
    } else {
      const o = stack.pop();
      if (!o || o.frame !== ev.frame) fail(`profile ${JSON.stringify(p.name)}: close of ${name} does not match its open`);
      const n = onStack.get(ev.frame) - 1;
      onStack.set(ev.frame, n);
      if (n === 0) totals.get(name).total += (ev.at - o.at) * scale;
    }
  }
  return totals;
}

(async () => {
  const {chromium: pw} = require('playwright-core');
  let browser;
  try {
    browser = await pw.launch({executablePath: chromium, args: ['--no-sandbox', '--disable-gpu']});
  } catch (e) {
    fail(`cannot start ${chromium}: ${e.message.split('\n')[0]}`);
  }
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'at-speedscope-'));
  try {
    // what speedscope's own command line does: a script that hands the file to the page
    const loader = path.join(tmp, 'load.js');
    fs.writeFileSync(loader, `speedscope.loadFileFromBase64(${JSON.stringify(path.basename(file))}, ${JSON.stringify(raw.toString('base64'))})`);
    const context = await browser.newContext({acceptDownloads: true, viewport: {width: 1280, height: 800}});
    const page = await context.newPage();
    const warnings = [];
    const errors = [];
    page.on('console', (m) => {
      if (m.type() === 'warning' && !/GL Driver Message/.test(m.text())) warnings.push(m.text()); // not the GPU's
      if (m.type() === 'error') errors.push(m.text());
    });
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`file://${path.join(release, 'index.html')}#localProfilePath=${loader}`);
    const exportTab = page.getByText(/^\W*Export$/).first(); /* "⤴️Export" */
    try {
      await exportTab.waitFor({timeout: 60000});
    } catch (e) {
      const body = await page.evaluate(() => document.body.innerText);
      fail(`speedscope did not show the profile (${e.message.split('\n')[0]}): ${errors.join(' | ') || body.slice(0, 300)}`);
    }
    // the toolbar's middle names the profile in view: "name (1/4)" when there are several
    const title = await page.evaluate(() => {
      const lines = document.body.innerText.split('\n').map((l) => l.trim());
      return lines.find((l) => /\(\d+\/\d+\)$/.test(l)) || lines.find((l) => l && !/Time Order|Export/.test(l)) || '';
    });
    console.log(`title ${title}`);
    const [download] = await Promise.all([page.waitForEvent('download', {timeout: 60000}), exportTab.click()]);
    const out = path.join(tmp, 'export.json');
    await download.saveAs(out);
    const got = JSON.parse(fs.readFileSync(out, 'utf8'));
    console.log(`profiles ${got.profiles.length} view ${got.activeProfileIndex}`);
    const toNs = {nanoseconds: 1, microseconds: 1e3, milliseconds: 1e6, seconds: 1e9};
    got.profiles.forEach((p, i) => {
      const scale = toNs[p.unit];
      if (!scale) fail(`profile ${i}: unit ${p.unit} is no time`);
      console.log(`profile ${i} ${p.name} unit=${p.unit} span=${Math.round((p.endValue - p.startValue) * scale)}`);
      const totals = frameTotals(p, got.shared.frames, scale);
      for (const [name, t] of totals) console.log(`frame ${i} ${name} total=${Math.round(t.total)} calls=${t.calls}`);
    });
    for (const w of warnings) console.log(`warning ${w}`);
    if (errors.length) fail(`the page reported: ${errors.join(' | ')}`);
    console.log('ok');
  } finally {
    await browser.close();
    fs.rmSync(tmp, {recursive: true, force: true});
  }
})().catch((e) => fail(e.stack || String(e)));
