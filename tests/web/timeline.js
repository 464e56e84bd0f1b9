/* timeline.js REPORT.html SHOTS-DIR PATH [PID]: the timeline of a report. Says what it shows (the
 * activity count, each name's count, each thread's lanes), then zooms with the wheel and the
 * buttons, pans by dragging, and clicks the bar of activity PATH: the view before and after each
 * step, the colour its bar is drawn in, the waterfall that opened. */
'use strict';
const { say, settle, shot, run } = require('./lib');

run(async (page, dir, [path, pid]) => {
  const R = (f, a) => page.evaluate(f, a);
  say('activities', (await page.textContent('#sum-acts')).replace(/,/g, ''));
  for (const c of await page.$$eval('#tl-legend .chip', (es) => es.map((e) => [e.dataset.name, e.dataset.count])))
    say('name', c[0], c[1]);
  for (const l of await R(() => acttraceReport.lanes())) say('thread', l.pid, l.tid, l.lanes, l.slices);
  await shot(page, dir, 'timeline-whole', '#timeline-sec');

  const box = await page.$eval('#tl-canvas', (e) => { const r = e.getBoundingClientRect(); return { x: r.left, y: r.top }; });
  const view = () => R(() => acttraceReport.view());
  let v = await view();
  const say_view = (what, a, b, extra) => say(what, a.t0, a.t1, b.t0, b.t1, ...(extra || []));
  /* the wheel, at three quarters of the plot: zooms in around the time under the pointer */
  const px = v.plotWidth * 0.75, x = box.x + v.plotLeft + px, y = box.y + 50;
  await page.mouse.move(x, y);
  for (let i = 0; i < 2; i++) {
    await page.mouse.wheel(0, -250);
    await settle(page);
    const w = await view();
    say_view('wheel', v, w, [px, v.plotWidth]);
    v = w;
  }
  /* the buttons zoom by two around the middle */
  await page.click('#tl-zoom-in');
  await settle(page);
  let w = await view();
  say_view('zoom-in', v, w);
  v = w;
  await page.click('#tl-zoom-out');
  await settle(page);
  w = await view();
  say_view('zoom-out', v, w);
  v = w;
  /* drag 200 px to the right: the view moves 200 px worth of time back */
  await page.mouse.move(x - 300, y);
  await page.mouse.down();
  await page.mouse.move(x - 200, y, { steps: 4 });
  await page.mouse.move(x - 100, y, { steps: 4 });
  await page.mouse.up();
  await settle(page);
  w = await view();
  say_view('drag', v, w, [200, v.plotWidth]);
  await shot(page, dir, 'timeline-zoomed', '#timeline-sec');

  /* click the bar of one activity, shown at a fifth of the plot */
  const row = await R(([p, q]) => acttraceReport.rowByPath(p, q === undefined ? undefined : Number(q)), [path, pid]);
  const a = await R((r) => acttraceReport.row(r), row);
  say('target', a.name, a.path, a.pid, a.start, a.dur);
  await R(([s, d]) => acttraceReport.setView(s - d * 0.5, s + d * 4.5), [a.start, Math.max(a.dur, 1000)]);
  const at = await R((r) => acttraceReport.locate(r), row);
  /* the colour at the bar's middle, or where a transfer's arrow drawn over the bars does not cross
   * it: at a third or two thirds of its width */
  const want = await R((n) => acttraceReport.colorOf(n), a.name);
  let rgb;
  for (const f of [0, -1 / 6, 1 / 6]) {
    rgb = await R(([px2, py2]) => {
      const c = document.getElementById('tl-canvas'), rc = c.getBoundingClientRect(), k = c.width / rc.width;
      return Array.from(c.getContext('2d').getImageData(Math.floor((px2 - rc.left) * k), Math.floor((py2 - rc.top) * k), 1, 1).data).slice(0, 3);
    }, [at.x + f * at.width, at.y]);
    if (rgb.every((v, i) => Math.abs(v - want[i]) <= 3)) break;
  }
  say('pixel', rgb.join(','), want.join(','), Math.round(at.width));
  await page.mouse.move(at.x, at.y);
  await settle(page);
  say('tooltip', JSON.stringify(await page.$eval('#tip', (e) => (e.hidden ? '' : e.textContent.split('\n')[0]))));
  await page.mouse.click(at.x, at.y);
  await page.waitForSelector('#wf-title', { state: 'attached' });
  const t = await page.$eval('#wf-title', (e) => [e.dataset.name, e.dataset.path, e.dataset.pid]);
  say('clicked', t[0], t[1], t[2]);
  await shot(page, dir, 'timeline-clicked');
});
