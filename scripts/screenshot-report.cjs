// Saves a full-page PNG of an inferbench report.html (or any offline HTML file) with Debian's
// headless Chromium driven by playwright-core (both installed by scripts/install-deps), network
// off: usage `node scripts/screenshot-report.cjs REPORT.html OUT.png [WIDTH]`. Prints what
// rendered (heatmap, memory lines, block map) and exits 1 on console/page errors.
'use strict';
const path = require('node:path');
const {chromium} = require(path.join(__dirname, '../tools/npm/node_modules/playwright-core'));

(async () => {
  const [file, png, width] = process.argv.slice(2);
  if (!file || !png) {
    console.error('usage: node scripts/screenshot-report.cjs REPORT.html OUT.png [WIDTH]');
    process.exit(2);
  }
  const browser = await chromium.launch({
    executablePath: process.env.IB_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
  const context = await browser.newContext({
    offline: true,
    viewport: {width: Number(width || 1400), height: 900},
  });
  const page = await context.newPage();
  const problems = [];
  page.on('console', m => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('pageerror', e => problems.push('page error: ' + e.message));
  await page.goto('file://' + path.resolve(file), {waitUntil: 'load'});
  await page.waitForSelector('#heatmap svg.main-svg', {timeout: 60000});
  const seen = await page.evaluate(() => ({
    heatmap_images: document.querySelectorAll('#heatmap .heatmaplayer image, #heatmap .hm image').length,
    line_traces: document.querySelectorAll('#lines .scatterlayer .trace').length,
    block_map_images: document.querySelectorAll('#blockmap .heatmaplayer image, #blockmap .hm image').length,
  }));
  await page.screenshot({path: png, fullPage: true});
  await browser.close();
  console.log(JSON.stringify({file, png, ...seen, problems}));
  process.exit(problems.length ? 1 : 0);
})().catch(e => { console.error(e.message); process.exit(1); });
