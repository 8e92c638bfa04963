#!/usr/bin/env python3
"""Golden logits from HF transformers for the engine's CPU regression test (engine_golden_test).

For each tiny model below this saves seeded random fp32 weights with save_pretrained, reloads the
saved files in fp32 (eager attention, TF32 off) and runs a 1,000-token prompt greedily for a few
steps, recording HF's tokens and every step's logits. The test (CI, no GPU) loads the same
directory in inferbench on the CPU and checks the tokens and a relative L2 error <= 1e-4 per step,
so the engine's exactness stays guarded where HF cannot run.

Models: llama3-tied (llama3 rope scaling whose three frequency bands all occur, tied embeddings,
GQA), qwen2-bias (q/k/v biases), phi3-window (Phi-3's fused qkv_proj / gate_up_proj, a sliding
window of 100 keys that the prompt passes ten times over).

Usage (GPU machine): tools/make_golden.py --out src/engine/testdata/golden
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers

from hf_models import ieee_fp32, make_config, random_model

COMMON = dict(vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
MODELS = {
    "llama3-tied": ("LlamaConfig", dict(COMMON, rope_theta=500000.0, rms_norm_eps=1e-5,
                                        tie_word_embeddings=True, bos_token_id=0,
                                        eos_token_id=1),
                    dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_position_embeddings=256)),
    "qwen2-bias": ("Qwen2Config", dict(COMMON, rope_theta=1000000.0, rms_norm_eps=1e-6,
                                       use_sliding_window=False, tie_word_embeddings=False,
                                       bos_token_id=0, eos_token_id=1), None),
    "phi3-window": ("Phi3Config", dict(COMMON, rope_theta=10000.0, rms_norm_eps=1e-5,
                                       sliding_window=100, tie_word_embeddings=False,
                                       bos_token_id=0, eos_token_id=1, pad_token_id=1), None),
}
PROMPT_LEN = 1000
STEPS = 8


def build(name, seed, directory):
    model = random_model(make_config(*MODELS[name]), seed)
    model.save_pretrained(directory)  # fp32 safetensors + config.json
    del model


@torch.no_grad()
def greedy(directory, prompt):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager").to("cuda").eval()
    rope = getattr(getattr(model.model, "rotary_emb", None), "rope_type", "?")
    ids = list(prompt)
    tokens, logits = [], []
    for _ in range(STEPS):
        out = model(torch.tensor([ids], device="cuda")).logits[0, -1].float().cpu().numpy()
        token = int(out.argmax())
        logits.append(out)
        tokens.append(token)
        ids.append(token)
    return tokens, np.stack(logits), rope


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="src/engine/testdata/golden")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ieee_fp32()
    for i, name in enumerate(MODELS):
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        build(name, args.seed + i, d)
        rng = np.random.default_rng(args.seed + i)
        prompt = [int(x) for x in rng.integers(2, COMMON["vocab_size"], size=PROMPT_LEN)]
        tokens, logits, rope = greedy(d, prompt)
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(dict(model=name, transformers=transformers.__version__,
                           torch=torch.__version__, rope_type=rope,
                           reference="from_pretrained(saved fp32 files), eager, TF32 off, "
                                     "greedy, one full forward per step",
                           prompt_token_ids=prompt, token_ids=tokens,
                           logits=[[float(x) for x in row] for row in logits]), f)
        print(f"{name}: rope {rope}, tokens {tokens}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
