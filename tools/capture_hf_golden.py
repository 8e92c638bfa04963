#!/usr/bin/env python3
"""Saves small random DeepSeek-V2 checkpoints with transformers' own fp32 logits and hidden
states, so the CPU engine can be compared with transformers on a machine without torch.

For each variant of tools/hf_compare.py's "deepseek-v2-tiny" family (1 dense layer with and
without YaRN, 1 dense layer without q LoRA, the 2-layer family itself) it writes DIR/VARIANT/
(config.json, model.safetensors in the published per-expert layout, as hf_compare.py saves them)
and DIR/VARIANT/golden.npz: prompt (24 ids), logits (24, vocab) and hidden_states (layers + 1,
24, hidden) from the model reloaded from those files in fp32, eager attention, TF32 off.
Usage (GPU machine): python3 tools/capture_hf_golden.py --out DIR
"""
import argparse
import copy
import os

import numpy as np
import torch
import transformers

import hf_compare
from hf_models import ieee_fp32

VARIANTS = {
    "dense1-yarn": dict(layers=1),
    "dense1-noyarn": dict(layers=1, rope=None),
    "dense1-noqlora": dict(layers=1, kw=dict(q_lora_rank=None)),
    "moe2": dict(layers=2),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ieee_fp32()
    base = hf_compare.FAMILIES["deepseek-v2-tiny"]
    for name, v in VARIANTS.items():
        cls, kwargs, rope, lengths = copy.deepcopy(base)
        kwargs.update(v.get("kw", {}))
        kwargs["vocab_size"] = 1024  # small files
        if "rope" in v:
            rope = v["rope"]
        hf_compare.FAMILIES["deepseek-v2-tiny"] = (cls, kwargs, rope, lengths)
        d = os.path.join(args.out, name)
        hf_compare.save_random_model("deepseek-v2-tiny", v["layers"], args.seed, d)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager").to("cuda").eval()
        rng = np.random.default_rng(args.seed)
        prompt = [int(x) for x in rng.integers(0, kwargs["vocab_size"], size=24)]
        with torch.no_grad():
            out = model(torch.tensor([prompt], device="cuda"), output_hidden_states=True)
        np.savez(os.path.join(d, "golden.npz"), prompt=np.array(prompt, dtype=np.int32),
                 logits=out.logits[0].float().cpu().numpy(),
                 hidden_states=torch.stack(out.hidden_states)[:, 0].float().cpu().numpy())
        print(name, "saved", flush=True)
        del model
        torch.cuda.empty_cache()
        hf_compare.FAMILIES["deepseek-v2-tiny"] = base


if __name__ == "__main__":
    main()
