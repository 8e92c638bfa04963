// Browser test (label "browser"): runs two short CPU benchmarks (the second with the test's fake
// NVML, so GPU series and the energy table are drawn too), builds a cross-run plot of both, and
// opens the three HTML files in Debian's headless Chromium (driven by playwright-core) with the
// network off. Fails on any console error, page error or non-file request, or when the heatmap
// did not render an SVG with a heatmap in it; saves PNG screenshots next to the build.
//
// Environment (set by CTest): INFERBENCH_BINARY, INFERBENCH_SOURCE_DIR, IB_BROWSER_OUT (folder
// for the screenshots), IB_CHROMIUM (the browser executable), IB_FAKE_NVML (the fake library).
'use strict';
const {spawnSync} = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const source = process.env.INFERBENCH_SOURCE_DIR;
const binary = process.env.INFERBENCH_BINARY;
const outDir = process.env.IB_BROWSER_OUT || os.tmpdir();
const chromiumPath = process.env.IB_CHROMIUM || '/usr/bin/chromium';
const {chromium} = require(path.join(source, 'tools/npm/node_modules/playwright-core'));

function runInferbench(args, env = {}) {
  const r = spawnSync(binary, args, {encoding: 'utf8', env: {...process.env, ...env}});
  if (r.status !== 0) {
    throw new Error(`inferbench ${args.join(' ')} exited ${r.status}:\n${r.stderr}`);
  }
  return r.stderr;
}

async function check(context, file, screenshot, expect) {
  const page = await context.newPage();
  const problems = [];
  page.on('console', m => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('pageerror', e => problems.push('page error: ' + e.message));
  await page.goto('file://' + file, {waitUntil: 'load'});
  await page.waitForSelector('#heatmap svg.main-svg', {timeout: 30000});
  const seen = await page.evaluate(() => {
    const count = (sel) => document.querySelectorAll(sel).length;
    return {
      heatmapSvgChildren: count('#heatmap svg.main-svg *'),
      heatmapTraces: count('#heatmap .heatmaplayer image, #heatmap .hm image'),
      lineTraces: count('#lines .scatterlayer .trace'),
      blockMapTraces: count('#blockmap .heatmaplayer image, #blockmap .hm image'),
      metricRows: count('#metrics tr'),
      energyRows: count('#energy tr'),
      models: count('#models input'),
    };
  });
  await page.screenshot({path: screenshot, fullPage: true});
  if (seen.heatmapSvgChildren < 10 || seen.heatmapTraces < 1) {
    problems.push('the heatmap did not render: ' + JSON.stringify(seen));
  }
  if (seen.lineTraces < 2) problems.push('memory lines missing: ' + JSON.stringify(seen));
  if (expect.blockMap && seen.blockMapTraces < 1) problems.push('block map missing');
  if (seen.models !== expect.models) problems.push(`expected ${expect.models} model(s) to select`);
  if (expect.energy && seen.energyRows < 4) problems.push('energy table missing');
  await page.close();
  return {problems, seen};
}

(async () => {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ib_browser_'));
  const run = (model, dir, env) => runInferbench(
      ['run', '--model', model, '--device', 'cpu', '--batch-size', '4', '--input-len', '16',
       '--output-len', '16', '--num-prompts', '8', '--runs', '2', '--memory-sample-interval', '10',
       '--disable-tqdm', '--result-dir', dir], env);
  const result = path.join(work, 'result');
  run('tiny-15m', result, {});
  const gpu = path.join(work, 'fake-gpu');
  run('tiny-110m', gpu, {INFERBENCH_NVML_LIBRARY: process.env.IB_FAKE_NVML});
  const plot = path.join(work, 'plot.html');
  runInferbench(['plot', result, gpu, '--out', plot]);

  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'ib_chromium_profile_'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath, headless: true, offline: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const requests = [];
  await context.route('**/*', route => {
    const url = route.request().url();
    if (url.startsWith('file:')) return route.continue();
    requests.push(url);
    return route.abort();
  });
  let failed = false;
  fs.mkdirSync(outDir, {recursive: true});
  const pages = [[path.join(result, 'report.html'), 'report.png', {blockMap: true, models: 1}],
                 [path.join(gpu, 'report.html'), 'report-fake-gpu.png',
                  {blockMap: true, models: 1, energy: true}],
                 [plot, 'plot.png', {blockMap: false, models: 2}]];
  for (const [file, png, expect] of pages) {
    const {problems, seen} = await check(context, file, path.join(outDir, png), expect);
    console.log(`${path.basename(file)}: ${JSON.stringify(seen)} -> ${path.join(outDir, png)}`);
    for (const p of problems) { console.log('  FAIL ' + p); failed = true; }
  }
  for (const u of requests) { console.log('  FAIL network request: ' + u); failed = true; }
  await context.close();
  fs.rmSync(profile, {recursive: true, force: true});
  fs.rmSync(work, {recursive: true, force: true});
  console.log(failed ? '0 passed, 1 failed' : '1 passed, 0 failed');
  process.exit(failed ? 1 : 0);
})().catch(e => { console.log('FAIL ' + (e.stack || e)); console.log('0 passed, 1 failed'); process.exit(1); });
