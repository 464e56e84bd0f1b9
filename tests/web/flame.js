/* flame.js REPORT.html SHOTS-DIR NAME: the flame graph of NAME. Says its total and the boxes under
 * the root (name, count, width in px of the graph's width), clicks the widest of them and says what
 * is then drawn (the zoomed box's width, its children), then resets the zoom. */
'use strict';
const { say, settle, shot, run } = require('./lib');

run(async (page, dir, [name]) => {
  const sel = '.flame[data-name="' + name + '"]';
  await page.locator(sel).scrollIntoViewIfNeeded();
  say('total', await page.$eval(sel, (e) => e.dataset.total));
  const boxes = (depth) => page.$$eval(sel + ' rect.frame:not(.anc)[data-depth="' + depth + '"]', (es) => es.map((e) =>
    [e.dataset.frame, e.dataset.count, Number(e.getAttribute('width')), Number(e.ownerSVGElement.getAttribute('width'))]));
  const kids = await boxes(1);
  for (const k of kids) say('child', JSON.stringify(k[0]), k[1], (k[2] / k[3]).toFixed(4));
  await shot(page, dir, 'flame', sel);
  if (!kids.length) return;
  const widest = kids.reduce((a, b) => (b[2] > a[2] ? b : a));
  await page.click(sel + ' rect.frame[data-depth="1"][data-frame="' + widest[0].replace(/["\\]/g, '\\$&') + '"]');
  await settle(page);
  say('focus', JSON.stringify(await page.$eval(sel, (e) => e.dataset.focus)));
  const z = (await boxes(1))[0];
  say('zoomed', JSON.stringify(z[0]), z[1], (z[2] / z[3]).toFixed(4));
  for (const k of await boxes(2)) say('grandchild', JSON.stringify(k[0]), k[1], (k[2] / k[3]).toFixed(4));
  say('ancestors', await page.$$eval(sel + ' rect.frame.anc', (es) => es.map((e) => e.dataset.frame).join(',')));
  await shot(page, dir, 'flame-zoomed', sel);
  await page.click(sel + ' button.reset');
  await settle(page);
  say('reset', JSON.stringify(await page.$eval(sel, (e) => e.dataset.focus)), (await boxes(1)).length);
});
