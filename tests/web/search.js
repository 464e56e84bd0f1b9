/* search.js REPORT.html SHOTS-DIR QUERY...: types each query into the search box; says how many
 * activities the page counts, how many rows the table then holds and which names they have. Then
 * clears the search. */
'use strict';
const { say, settle, shot, run } = require('./lib');

run(async (page, dir, queries) => {
  for (const [i, q] of queries.entries()) {
    await page.fill('#search', q);
    await page.press('#search', 'Enter');
    await page.waitForSelector('#search-count[data-query="' + q.replace(/["\\]/g, '\\$&') + '"]', { state: 'attached' });
    await settle(page);
    const count = await page.$eval('#search-count', (e) => e.dataset.count);
    const rows = await page.$eval('#tb-info', (e) => e.dataset.rows);
    const names = await page.$$eval('#acts tbody tr[data-row] td:first-child', (es) => [...new Set(es.map((e) => e.textContent))].sort());
    say('search', JSON.stringify(q), count, rows, names.join(',') || '-');
    if (i === 0) await shot(page, dir, 'search', null);
  }
  await page.click('#search-clear');
  await settle(page);
  say('cleared', await page.$eval('#search-count', (e) => e.dataset.count), await page.$eval('#tb-info', (e) => e.dataset.rows));
});
