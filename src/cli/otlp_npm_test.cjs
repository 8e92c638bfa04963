// The OTLP traces of `inferbench serve` and `inferbench run --backend openai`, decoded by
// OpenTelemetry's own protobuf types (@opentelemetry/otlp-transformer's generated root, the code
// the OpenTelemetry JS exporters use) as a collector in this process receives them over HTTP.
// Checked: the span tree (a client span per request, the server's request span its child
// through the traceparent header, queue/prefill/decode/detokenize under it), the attributes, one
// trace across both processes, the sampling rules (ratio by trace id, agreed by client and
// server; failed and slow requests always), and that an unreachable collector drops and counts
// spans while the run completes. `inferbench run --backend native` exports the engine's request
// spans through the same code as serve: checked the same way, and against the run's own records.
// Usage: node otlp_npm_test.cjs INFERBENCH
'use strict';
const assert = require('node:assert/strict');
const {spawn, execFile} = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const {promisify} = require('node:util');
const npm = path.join(__dirname, '../../tools/npm/node_modules');
const otlp = require(
    path.join(npm, '@opentelemetry/otlp-transformer/build/src/generated/root.js'));

const Request = otlp.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
const kInternal = 1, kServer = 2, kClient = 3, kStatusError = 2;
const inferbench = process.argv[2];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'otlp-npm-'));

// --- the collector: every POST /v1/traces decoded into flat spans -------------------------
const received = [];
let posts = 0;
function attributes(list) {
  const out = {};
  for (const kv of list || []) {
    const v = kv.value;
    if ('stringValue' in v) out[kv.key] = v.stringValue;
    else if ('intValue' in v) out[kv.key] = Number(v.intValue);
    else if ('doubleValue' in v) out[kv.key] = v.doubleValue;
    else if ('boolValue' in v) out[kv.key] = v.boolValue;
    else if ('arrayValue' in v) out[kv.key] = v.arrayValue.values.map((x) => x.stringValue);
  }
  return out;
}
const hex = (b64) => Buffer.from(b64 || '', 'base64').toString('hex');
const collector = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    assert.equal(req.method, 'POST');
    assert.equal(req.url, '/v1/traces');
    assert.equal(req.headers['content-type'], 'application/x-protobuf');
    const message = Request.toObject(Request.decode(Buffer.concat(chunks)),
                                     {longs: String, bytes: String, defaults: false});
    ++posts;
    for (const rs of message.resourceSpans) {
      const service = attributes(rs.resource.attributes)['service.name'];
      for (const ss of rs.scopeSpans) {
        assert.equal(ss.scope.name, 'inferbench');
        for (const s of ss.spans) {
          received.push({
            service,
            traceId: hex(s.traceId),
            spanId: hex(s.spanId),
            parentSpanId: hex(s.parentSpanId),
            name: s.name,
            kind: s.kind,
            start: BigInt(s.startTimeUnixNano),
            end: BigInt(s.endTimeUnixNano),
            attributes: attributes(s.attributes),
            status: s.status || {},
          });
        }
      }
    }
    res.writeHead(200, {'Content-Type': 'application/x-protobuf'});
    res.end();
  });
});

// --- processes --------------------------------------------------------------------------
function startServer(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(inferbench, ['serve', '--port', '0', ...args],
                        {stdio: ['ignore', 'ignore', 'pipe']});
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += d;
      const m = /on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr);
      if (m && !child.port) {
        child.port = Number(m[1]);
        resolve(child);
      }
    });
    child.on('exit', (code) => reject(new Error(`serve exited ${code}: ${stderr}`)));
  });
}
function stopServer(child) {
  return new Promise((resolve) => {
    child.removeAllListeners('exit');
    child.on('exit', resolve);
    child.kill('SIGTERM');
  });
}
let runs = 0;
async function run(port, args) {
  const dir = path.join(tmp, `run${++runs}`);
  await promisify(execFile)(inferbench, [
    'run', '--backend', 'openai', '--base-url', `http://127.0.0.1:${port}`, '--runs', '1',
    '--num-warmups', '0', '--input-len', '8', '--disable-tqdm', '--result-dir', dir, ...args,
  ]);
  return JSON.parse(fs.readFileSync(path.join(dir, 'result.json'), 'utf8'));
}
function get(port, urlPath) {
  return new Promise((resolve, reject) => {
    http.get({host: '127.0.0.1', port, path: urlPath}, (res) => {
      let body = '';
      res.on('data', (d) => body += d);
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
}
// A sample of /metrics: the line of `name` whose labels include `label`.
function metric(text, name, label = '') {
  const line = text.split('\n').find((l) => l.startsWith(name + '{') && l.includes(label));
  assert.ok(line, `/metrics has ${name}{${label}}`);
  return Number(line.split(' ').pop());
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(what, predicate) {
  for (let i = 0; i < 200 && !(await predicate()); ++i) await sleep(50);
  assert.ok(await predicate(), `timed out waiting for ${what}`);
}
function take() {
  return received.splice(0, received.length);
}
const byService = (spans, service) => spans.filter((s) => s.service === service);

// --- the scenarios ----------------------------------------------------------------------
async function spanTreeAcrossClientAndServer(endpoint) {
  const n = 6;
  const server = await startServer(['--model', 'tiny-15m', '--kv-cache-memory', '64MiB',
                                    '--num-threads', '1', '--otlp-endpoint', endpoint]);
  const result = await run(server.port, ['--model', 'tiny-15m', '--num-prompts', String(n),
                                         '--output-len', '4', '--max-concurrency', '2',
                                         '--otlp-endpoint', endpoint]);
  await waitFor('the server spans', () => byService(received, 'inferbench serve').length >= 5 * n);
  await stopServer(server);
  const spans = take();
  assert.equal(result.completed, n);
  assert.deepEqual(
      {kept: result.engine.traces.requests_kept, exported: result.engine.traces.spans_exported,
       dropped: result.engine.traces.spans_dropped_export_failed +
           result.engine.traces.spans_dropped_queue_full},
      {kept: n, exported: n, dropped: 0});

  const clients = byService(spans, 'inferbench run');
  const servers = byService(spans, 'inferbench serve');
  assert.equal(clients.length, n, 'one client span per request');
  assert.equal(servers.length, 5 * n, 'five server spans per request');
  assert.equal(new Set(clients.map((s) => s.traceId)).size, n, 'one trace per request');
  for (const c of clients) {
    assert.equal(c.kind, kClient);
    assert.equal(c.parentSpanId, '', 'the client span is the root');
    assert.equal(c.name, 'text_completion tiny-15m');
    assert.equal(c.attributes['gen_ai.operation.name'], 'text_completion');
    assert.equal(c.attributes['gen_ai.request.model'], 'tiny-15m');
    assert.equal(c.attributes['gen_ai.usage.output_tokens'], 4);
    assert.equal(c.attributes['gen_ai.usage.input_tokens'], 8);
    assert.deepEqual(c.attributes['gen_ai.response.finish_reasons'], ['length']);
    assert.ok(c.attributes['gen_ai.latency.time_to_first_token'] > 0);

    const inTrace = servers.filter((s) => s.traceId === c.traceId);
    assert.equal(inTrace.length, 5, 'the server continued the client\'s trace');
    const request = inTrace.find((s) => s.kind === kServer);
    assert.equal(request.parentSpanId, c.spanId, 'the server span is the client span\'s child');
    assert.equal(request.name, 'text_completion tiny-15m');
    const a = request.attributes;
    assert.equal(a['gen_ai.request.model'], 'tiny-15m');
    assert.equal(a['gen_ai.response.model'], 'tiny-15m');
    assert.equal(a['gen_ai.usage.input_tokens'], 8);
    assert.equal(a['gen_ai.usage.output_tokens'], 4);
    assert.equal(a['gen_ai.usage.prompt_tokens'], 8);
    assert.equal(a['gen_ai.usage.completion_tokens'], 4);
    assert.equal(a['gen_ai.request.max_tokens'], 4);
    assert.equal(a['http.response.status_code'], 200);
    assert.deepEqual(a['gen_ai.response.finish_reasons'], ['length']);
    assert.equal(request.status.code || 0, 0, 'a finished request is not an error');
    // The client waited at least as long as the server worked (one host, one wall clock; the
    // two processes' clock offsets differ by microseconds).
    const slackNs = 2000000n;
    assert.ok(request.start + slackNs >= c.start && request.end <= c.end + slackNs,
              'the server span lies within the client span');
    assert.ok(c.attributes['gen_ai.latency.time_to_first_token'] + 0.002 >=
              a['gen_ai.latency.time_to_first_token']);

    const children = inTrace.filter((s) => s.parentSpanId === request.spanId);
    assert.deepEqual(children.map((s) => s.name).sort(),
                     ['decode', 'detokenize', 'prefill', 'queue']);
    const child = Object.fromEntries(children.map((s) => [s.name, s]));
    for (const s of children) {
      assert.equal(s.kind, 1, `${s.name} is INTERNAL`);
      assert.ok(s.start >= request.start && s.end <= request.end && s.start <= s.end,
                `${s.name} lies within the request span`);
    }
    assert.equal(child.queue.start, request.start, 'the queue starts at arrival');
    assert.equal(child.queue.end, child.prefill.start, 'prefill follows the queue');
    assert.equal(child.prefill.end, child.decode.start, 'decode follows the first token');
    assert.ok(child.detokenize.start >= child.prefill.end, 'text is made from the first token on');
    const ttftNs = BigInt(Math.round(a['gen_ai.latency.time_to_first_token'] * 1e9));
    const spanTtft = child.prefill.end - request.start;
    assert.ok(spanTtft - ttftNs < 1000n && ttftNs - spanTtft < 1000n,
              'TTFT is arrival to the end of prefill');
    assert.equal(child.prefill.attributes['gen_ai.usage.input_tokens'], 8);
    assert.equal(child.decode.attributes['gen_ai.usage.output_tokens'], 4);
    assert.ok(child.detokenize.attributes['inferbench.detokenize_busy_ns'] > 0);
  }
  return n;
}

// The embedded engine (run --backend native): per request an INTERNAL request span, the root of
// its own trace, with queue, prefill and decode children (no text is made, so no detokenize), the
// same attributes as serve's, and TTFT as the run itself measured it.
async function nativeRunSpans(endpoint) {
  const n = 4;
  const dir = path.join(tmp, 'native');
  await promisify(execFile)(inferbench, [
    'run', '--model', 'tiny-15m', '--num-prompts', String(n), '--batch-size', '2',
    '--input-len', '8', '--output-len', '4', '--runs', '1', '--num-warmups', '0',
    '--num-threads', '1', '--disable-tqdm', '--otlp-endpoint', endpoint, '--result-dir', dir,
  ]);
  const result = JSON.parse(fs.readFileSync(path.join(dir, 'result.json'), 'utf8'));
  const records = fs.readFileSync(path.join(dir, 'requests.jsonl'), 'utf8')
                      .split('\n').filter((l) => l).map((l) => JSON.parse(l));
  assert.equal(result.completed, n);
  assert.deepEqual(
      {kept: result.engine.traces.requests_kept, exported: result.engine.traces.spans_exported,
       dropped: result.engine.traces.spans_dropped_export_failed +
           result.engine.traces.spans_dropped_queue_full},
      {kept: n, exported: 4 * n, dropped: 0});
  const spans = take();
  assert.equal(spans.length, 4 * n, 'four spans per request');
  const requests = spans.filter((s) => s.parentSpanId === '');
  assert.equal(requests.length, n, 'one root span per request');
  assert.equal(new Set(requests.map((s) => s.traceId)).size, n, 'one trace per request');
  for (const request of requests) {
    assert.equal(request.service, 'inferbench run');
    assert.equal(request.kind, kInternal, 'the engine in the process: INTERNAL');
    assert.equal(request.name, 'text_completion tiny-15m');
    const a = request.attributes;
    assert.equal(a['gen_ai.operation.name'], 'text_completion');
    assert.equal(a['gen_ai.request.model'], 'tiny-15m');
    assert.equal(a['gen_ai.response.model'], 'tiny-15m');
    assert.equal(a['gen_ai.usage.input_tokens'], 8);
    assert.equal(a['gen_ai.usage.output_tokens'], 4);
    assert.equal(a['gen_ai.request.max_tokens'], 4);
    assert.deepEqual(a['gen_ai.response.finish_reasons'], ['length']);
    assert.ok(!('http.response.status_code' in a), 'no HTTP inside the process');
    assert.ok(!('inferbench.lora_adapter' in a), 'no adapter asked for');
    assert.equal(request.status.code || 0, 0);

    const children = spans.filter((s) => s.parentSpanId === request.spanId);
    assert.deepEqual(children.map((s) => s.name).sort(), ['decode', 'prefill', 'queue']);
    const child = Object.fromEntries(children.map((s) => [s.name, s]));
    for (const s of children) {
      assert.equal(s.kind, kInternal, `${s.name} is INTERNAL`);
      assert.equal(s.traceId, request.traceId);
      assert.ok(s.start >= request.start && s.end <= request.end && s.start <= s.end,
                `${s.name} lies within the request span`);
    }
    assert.equal(child.queue.start, request.start, 'the queue starts at submission');
    assert.equal(child.queue.end, child.prefill.start, 'prefill follows the queue');
    assert.equal(child.prefill.end, child.decode.start, 'decode follows the first token');
    assert.equal(child.decode.end, request.end, 'the request ends with its last token');
    assert.equal(child.prefill.attributes['gen_ai.usage.input_tokens'], 8);
    assert.equal(child.decode.attributes['gen_ai.usage.output_tokens'], 4);
    const ttftS = a['gen_ai.latency.time_to_first_token'];
    const spanTtftNs = child.prefill.end - request.start;
    assert.ok(Math.abs(Number(spanTtftNs) - ttftS * 1e9) < 1000, 'TTFT is the prefill\'s end');
    // The run's own record of the request: its TTFT (from the runner's send) holds the span's.
    const record = records.find((r) => String(r.id) === a['gen_ai.request.id']);
    assert.ok(record, `a record with id ${a['gen_ai.request.id']}`);
    assert.equal(record.n_out, 4);
    assert.ok(ttftS * 1e3 <= record.ttft_ms + 0.01 && record.ttft_ms - ttftS * 1e3 < 5,
              `span TTFT ${ttftS * 1e3} ms against the record's ${record.ttft_ms} ms`);
  }
  return n;
}

async function ratioIsAgreedByTraceId(endpoint) {
  const n = 40;
  const sampling = ['--otlp-endpoint', endpoint, '--trace-sample-ratio', '0.5'];
  const server = await startServer(['--model', 'null', ...sampling]);
  const result = await run(server.port, ['--model', 'null', '--num-prompts', String(n),
                                         '--output-len', '2', ...sampling]);
  const kept = result.engine.traces.requests_kept;
  assert.ok(kept >= 8 && kept <= 32, `about half of ${n} traces kept: ${kept}`);
  assert.equal(kept + result.engine.traces.requests_sampled_out, n);
  await waitFor('the kept server spans',
                () => byService(received, 'inferbench serve').length >= 5 * kept);
  const metrics = await get(server.port, '/metrics');
  assert.equal(metric(metrics, 'inferbench_trace_requests_total', 'decision="kept"'), kept);
  assert.equal(metric(metrics, 'inferbench_trace_requests_total', 'decision="sampled_out"'), n - kept);
  await stopServer(server);
  const spans = take();
  const clientTraces = byService(spans, 'inferbench run').map((s) => s.traceId).sort();
  const serverTraces = [...new Set(byService(spans, 'inferbench serve').map((s) => s.traceId))];
  assert.equal(clientTraces.length, kept);
  assert.deepEqual(serverTraces.sort(), clientTraces, 'client and server kept the same traces');
}

async function failedAndSlowRequestsAreAlwaysKept(endpoint) {
  // The null model at 50 tokens/s: 2 tokens take about 40 ms, 12 about 240 ms.
  const sampling = ['--otlp-endpoint', endpoint, '--trace-sample-ratio', '0',
                    '--trace-slow-ms', '150'];
  const server = await startServer(['--model', 'null', '--token-rate', '50', ...sampling]);
  const fast = await run(server.port, ['--model', 'null', '--num-prompts', '4',
                                       '--output-len', '2', ...sampling]);
  assert.equal(fast.engine.traces.requests_kept, 0, 'fast requests are sampled out');
  const slow = await run(server.port, ['--model', 'null', '--num-prompts', '4',
                                       '--output-len', '12', ...sampling]);
  assert.equal(slow.engine.traces.requests_kept, 4, 'slow requests are kept');
  // top_p 2 is refused by the server (400): failures are kept on both sides.
  const failed = await run(server.port, ['--model', 'null', '--num-prompts', '3',
                                         '--output-len', '2', '--extra-body', '{"top_p": 2}',
                                         ...sampling]).catch((e) => e);
  await waitFor('the slow and failed server spans',
                () => byService(received, 'inferbench serve').length >= 4 * 5 + 3);
  await stopServer(server);
  const spans = take();
  assert.equal(byService(spans, 'inferbench run').length, 4 + 3);
  const requests = byService(spans, 'inferbench serve').filter((s) => s.kind === kServer);
  const slowOnes = requests.filter((s) => s.status.code !== kStatusError);
  assert.equal(slowOnes.length, 4);
  for (const s of slowOnes) assert.ok(s.attributes['gen_ai.latency.e2e'] >= 0.15);
  const refused = requests.filter((s) => s.status.code === kStatusError);
  assert.equal(refused.length, 3);
  for (const s of refused) {
    assert.equal(s.attributes['http.response.status_code'], 400);
    assert.match(s.status.message, /top_p/);
    const client = spans.find((c) => c.spanId === s.parentSpanId);
    assert.ok(client, 'the refused request\'s span is the client span\'s child');
    assert.equal(client.status.code, kStatusError);
  }
  assert.ok(!(failed instanceof Error) || failed.code === 1, 'failed requests: exit 0 or 1');
}

async function unreachableCollectorCountsDrops() {
  const closed = http.createServer();
  await new Promise((r) => closed.listen(0, '127.0.0.1', r));
  const endpoint = `http://127.0.0.1:${closed.address().port}`;
  await new Promise((r) => closed.close(r));  // nothing listens there now
  const n = 5;
  const server = await startServer(['--model', 'null', '--otlp-endpoint', endpoint]);
  const result = await run(server.port, ['--model', 'null', '--num-prompts', String(n),
                                         '--output-len', '2', '--otlp-endpoint', endpoint]);
  assert.equal(result.completed, n, 'the run completed');
  assert.equal(result.engine.traces.spans_dropped_export_failed, n);
  assert.equal(result.engine.traces.spans_exported, 0);
  assert.match(result.engine.traces.last_error, /connect/);
  await waitFor('the server\'s drop counter', async () => {
    const m = await get(server.port, '/metrics');
    return metric(m, 'inferbench_trace_spans_dropped_total', 'reason="export_failed"') === 5 * n;
  });
  const m = await get(server.port, '/metrics');
  assert.equal(metric(m, 'inferbench_trace_spans_exported_total'), 0);
  await stopServer(server);
}

async function main() {
  await new Promise((r) => collector.listen(0, '127.0.0.1', r));
  const endpoint = `http://127.0.0.1:${collector.address().port}`;
  const n = await spanTreeAcrossClientAndServer(endpoint);
  console.log(`span tree: ${n} requests, one trace each across run and serve`);
  const native = await nativeRunSpans(endpoint);
  console.log(`run --backend native: ${native} requests, queue/prefill/decode under each`);
  await ratioIsAgreedByTraceId(endpoint);
  console.log('ratio 0.5: client and server kept the same traces');
  await failedAndSlowRequestsAreAlwaysKept(endpoint);
  console.log('ratio 0: slow and failed requests kept, fast ones not');
  await unreachableCollectorCountsDrops();
  console.log('unreachable collector: spans dropped and counted, the run completed');
  console.log(`${posts} OTLP requests decoded`);
  collector.close();
  fs.rmSync(tmp, {recursive: true, force: true});
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
