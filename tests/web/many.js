/* many.js REPORT.html SHOTS-DIR: a report of a great many activities. Says what the page counts and
 * draws of the whole trace (bars, and activities merged into pixel columns: together every slice),
 * the longest activity (the table's first row), then zooms in with the wheel at that activity's bar
 * step by step (the view and what is drawn after each step) and clicks the bar. */
'use strict';
const { say, settle, shot, run } = require('./lib');

run(async (page, dir) => {
  const R = (f, a) => page.evaluate(f, a);
  say('timings', JSON.stringify(await R(() => acttraceReport.timings)));
  say('activities', (await page.textContent('#sum-acts')).replace(/,/g, ''));
  for (const l of await R(() => acttraceReport.lanes())) say('thread', l.pid, l.tid, l.lanes, l.slices);
  let d = await R(() => acttraceReport.drawn());
  say('whole', d.rects, d.merged, d.columns);
  await shot(page, dir, 'many-whole', '#timeline-sec');
  const r = Number(await page.$eval('#acts tbody tr[data-row]', (e) => e.dataset.row));
  const a = await R((x) => acttraceReport.row(x), r);
  say('first', a.name, a.path, a.pid, a.start, a.dur);
  const at = await R((x) => acttraceReport.locate(x), r);
  await page.mouse.move(at.x, at.y);
  for (let i = 0; i < 8; i++) {
    const v = await R(() => acttraceReport.view());
    await page.mouse.wheel(0, -400);
    await settle(page);
    const w = await R(() => acttraceReport.view());
    d = await R(() => acttraceReport.drawn());
    say('wheel', i, v.t0, v.t1, w.t0, w.t1, d.rects, d.merged, d.columns);
  }
  await shot(page, dir, 'many-zoomed', '#timeline-sec');
  const at2 = await R((x) => acttraceReport.locate(x), r);
  await page.mouse.click(at2.x, at2.y);
  await page.waitForSelector('#wf-title', { state: 'attached' });
  say('clicked', await page.$eval('#wf-title', (e) => [e.dataset.name, e.dataset.path, e.dataset.pid].join(' ')));
  await shot(page, dir, 'many-page');
});
