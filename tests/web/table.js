/* table.js REPORT.html SHOTS-DIR: the activity table. Says its first row as the page opens (by
 * duration, longest first), then after clicking the Duration title (shortest first), the Start
 * title and the Name title; then pages forward and to the last page. */
'use strict';
const { say, settle, shot, run } = require('./lib');

run(async (page, dir) => {
  const first = async (what) => {
    const r = Number(await page.$eval('#acts tbody tr[data-row]', (e) => e.dataset.row));
    const a = await page.evaluate((x) => acttraceReport.row(x), r);
    const s = await page.$eval('#tb-sort', (e) => e.dataset.key + '-' + e.dataset.dir);
    say('first', what, s, a.name, a.path, a.pid, a.start, a.dur, await page.$eval('#acts tbody tr[data-row] td:last-child', (e) => JSON.stringify(e.textContent)));
  };
  await first('opened');
  await shot(page, dir, 'table', '#table-sec');
  await page.click('#acts th[data-sort="dur"]');
  await first('dur-clicked');
  await page.click('#acts th[data-sort="start"]');
  await first('start-clicked');
  await page.click('#acts th[data-sort="name"]');
  await first('name-clicked');
  const info = () => page.$eval('#tb-info', (e) => [e.dataset.page, e.dataset.pages, e.dataset.rows, document.querySelectorAll('#acts tbody tr[data-row]').length].join(' '));
  say('page', await info());
  await page.click('#tb-next');
  say('page', await info());
  await page.click('#tb-last');
  say('page', await info());
  await settle(page);
});
