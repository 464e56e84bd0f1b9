/* waterfall.js REPORT.html SHOTS-DIR NAME: searches for NAME alone, opens the first row of the table
 * (the longest such activity) and says the waterfall: each row (depth, name, path, pid, start,
 * duration, threads, transfers), each row's split (CPU, blocked and queued ns, and the text after
 * its bar), the stack of its Start and the events inside it; then opens the detail of its second
 * row. */
'use strict';
const { say, settle, shot, run } = require('./lib');

run(async (page, dir, [name]) => {
  await page.fill('#search', '"' + name + '"');
  await page.press('#search', 'Enter');
  await page.waitForSelector('#search-count[data-query]', { state: 'attached' });
  await page.click('#acts tbody tr[data-row]');
  await page.waitForSelector('#wf-title', { state: 'attached' });
  await settle(page);
  const t = await page.$eval('#wf-title', (e) => [e.dataset.name, e.dataset.path, e.dataset.pid]);
  say('root', t.join(' '));
  for (const r of await page.$$eval('.wf-row', (es) => es.map((e) => e.dataset)))
    say('row', r.depth, r.name, r.path, r.pid, r.start, r.dur, r.threads || '-', r.xfers || '-');
  for (const r of await page.$$eval('.wf-row', (es) => es.map((e) => [e.dataset.path, e.dataset.cpu, e.dataset.blocked,
    e.dataset.queued, e.querySelector('text.wf-dur').textContent])))
    say('split', r[0], r[1], r[2], r[3], JSON.stringify(r[4]));
  say('bars', await page.$$eval('.wf-row rect.wf-bar', (es) => es.length), 'visits', await page.$$eval('.wf-row rect.wf-visit', (es) => es.length),
    'arrows', await page.$$eval('.wf-row .wf-xfer', (es) => es.length), 'more', await page.$$eval('#wf-more', (es) => es.length));
  for (const f of await page.$$eval('#wf-start-stack li', (es) => es.map((e) => e.textContent))) say('frame', f);
  for (const e of await page.$$eval('#wf-detail .ev', (es) => es.map((x) => (x.querySelector('summary') || x).textContent))) say('event', JSON.stringify(e));
  await shot(page, dir, 'waterfall', '#wf-sec');
  const rows = await page.$$('.wf-row');
  if (rows.length > 1) {
    await rows[1].click();
    await settle(page);
    say('detail', await page.$eval('#wf-detail h3', (e) => e.textContent));
  }
});
