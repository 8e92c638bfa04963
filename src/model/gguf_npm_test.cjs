// The GGUF reader and writer against an independent parser: gguf_fixture writes a file with
// the project's writer and prints what it wrote (and where the project's reader found each
// tensor); @huggingface/gguf parses the file, and every key, type, value, tensor name, shape,
// ggml type and offset must agree. Usage: node gguf_npm_test.cjs FIXTURE_BINARY OUT.gguf
'use strict';
const assert = require('node:assert/strict');
const {execFileSync} = require('node:child_process');
const path = require('node:path');
const {gguf} = require(path.join(__dirname, '../../tools/npm/node_modules/@huggingface/gguf'));

// A value as the fixture prints it: 64-bit integers (bigint here) as decimal strings.
function normalized(v) {
  if (Array.isArray(v)) return v.map(normalized);
  if (typeof v === 'bigint') return v.toString();
  return v;
}

// Integers of up to 32 bits come back as numbers; the fixture prints every integer as a string.
function expectedValue(entry, v) {
  const integer = (t) => [0, 1, 2, 3, 4, 5, 10, 11].includes(t);
  if (Array.isArray(v)) return v.map((x) => (integer(entry.sub_type) ? String(x) : x));
  return integer(entry.type) ? String(v) : v;
}

async function main() {
  const [fixture, file] = process.argv.slice(2);
  if (!fixture || !file) {
    console.error('usage: node gguf_npm_test.cjs FIXTURE_BINARY OUT.gguf');
    process.exit(2);
  }
  const expected = JSON.parse(execFileSync(fixture, [file], {encoding: 'utf8'}));
  const parsed = await gguf(file, {allowLocalFile: true, typedMetadata: true});

  assert.equal(parsed.metadata.version, 3);
  assert.equal(Number(parsed.metadata.tensor_count), expected.tensors.length);
  assert.equal(Number(parsed.metadata.kv_count), expected.metadata.length);
  for (const entry of expected.metadata) {
    const got = parsed.typedMetadata[entry.key];
    assert.ok(got, `@huggingface/gguf did not find metadata '${entry.key}'`);
    assert.equal(got.type, entry.type, `type of '${entry.key}'`);
    if (entry.sub_type !== undefined) assert.equal(got.subType, entry.sub_type, `element type of '${entry.key}'`);
    assert.deepEqual(expectedValue(entry, normalized(got.value)), entry.value, `value of '${entry.key}'`);
  }

  assert.equal(parsed.tensorDataOffset, BigInt(expected.tensor_data_offset), 'data section offset');
  assert.equal(parsed.tensorInfos.length, expected.tensors.length);
  expected.tensors.forEach((t, i) => {
    const got = parsed.tensorInfos[i];
    assert.equal(got.name, t.name, `name of tensor ${i}`);
    assert.equal(got.n_dims, t.dims.length, `n_dims of ${t.name}`);
    assert.deepEqual(got.shape.map(Number), t.dims, `shape of ${t.name}`);
    assert.equal(got.dtype, t.type, `ggml type of ${t.name}`);
    assert.equal(got.offset, BigInt(t.offset), `offset of ${t.name}`);
    assert.equal(Number(got.offset) % expected.alignment, 0, `alignment of ${t.name}`);
  });
  console.log(`gguf_npm_test: @huggingface/gguf agrees on ${expected.metadata.length} metadata ` +
              `entries and ${expected.tensors.length} tensors`);
}

main().catch((e) => {
  console.error(`gguf_npm_test: ${e.stack || e}`);
  process.exit(1);
});
