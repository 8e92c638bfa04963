#!/usr/bin/env python3
"""inferbench with a LoRA adapter against HF transformers + peft, by logits.

For each family (Llama-3-8B's and Qwen2-7B's real shapes with fewer layers, as tools/hf_compare.py
builds them; "llama-tiny" and "qwen2-tiny" at toy sizes for quick CPU rows) and each rank (8 and
64 by default), this saves a random base model (save_pretrained, bf16 safetensors), wraps it with
peft's get_peft_model (LoraConfig with every linear target: q, k, v, o, gate, up, down_proj;
alpha = 2 r; rsLoRA on the rank-64 adapter so both scalings are exercised), draws seeded random
lora_A and lora_B (peft's default init leaves B at zero, which would test nothing) and saves the
adapter as peft does (adapter_config.json + adapter_model.safetensors, fp32).

The reference reloads the saved base in fp32 (eager attention, TF32 off) and applies the saved
adapter with PeftModel.from_pretrained, unmerged. `inferbench generate --lora-modules a=DIR` runs
the same files greedily (--dump-logits) per backend and dtype, serving the adapter unmerged
(mode "unmerged") or folded into the weights (mode "merged", --merge-lora). HF's logits are
teacher-forced on inferbench's tokens and every generated step is compared by relative L2 error:
fp32 <= 1e-4, bf16 <= 1e-2 (tools/hf_compare.py's tolerances). A run that inferbench refuses
(exit 2) is listed as not run, with its message.

Usage (GPU machine):
  tools/hf_compare_lora.py --inferbench build/h200/bin/inferbench --out DIR
CPU rows only (HF on the CPU too; toy sizes run in seconds):
  tools/hf_compare_lora.py --families llama-tiny,qwen2-tiny --runs cpu:fp32 --hf-device cpu
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch
import transformers

from hf_compare import FAMILIES as HF_FAMILIES
from hf_compare import (TOLERANCE, Refused, add_common_args, compare, describe_error, print_table,
                        run_inferbench)
from hf_models import ieee_fp32, make_config, random_model

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
FAMILIES = {
    "llama-3": HF_FAMILIES["llama-3"][:3],
    "qwen2": HF_FAMILIES["qwen2"][:3],
    "llama-tiny": ("LlamaConfig", dict(
        vocab_size=1024, hidden_size=256, intermediate_size=512, num_attention_heads=8,
        num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5,
        max_position_embeddings=8192, tie_word_embeddings=False), None),
    "qwen2-tiny": ("Qwen2Config", dict(
        vocab_size=1024, hidden_size=256, intermediate_size=512, num_attention_heads=8,
        num_key_value_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
        max_position_embeddings=8192, use_sliding_window=False, tie_word_embeddings=False), None),
}


def save_base(name, layers, seed, directory, device):
    cls_name, kwargs, rope = FAMILIES[name]
    config = make_config(cls_name, dict(kwargs, num_hidden_layers=layers), rope)
    model = random_model(config, seed, device=device)
    model.to(torch.bfloat16).save_pretrained(directory)
    del model


def save_adapter(base_dir, adapter_dir, rank, seed, device):
    """A random PEFT LoRA adapter on every linear target of the saved base, saved by peft."""
    import peft
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS,
                             lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                             use_rslora=rank >= 64)
    model = peft.get_peft_model(base.to(device), config)
    scale = 2 * rank / (rank ** 0.5 if config.use_rslora else rank)  # peft's scaling
    torch.manual_seed(seed + rank)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_A" in n:  # (r, in): each component of A x has about unit variance
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
            elif "lora_B" in n:  # (out, r): scale * B A x with std ~0.3 against unit outputs
                p.normal_(0.0, 0.3 / (scale * rank ** 0.5))
    model.save_pretrained(adapter_dir)
    del model, base


def load_reference(base_dir, adapter_dir, device):
    import peft
    base = transformers.AutoModelForCausalLM.from_pretrained(
        base_dir, dtype=torch.float32, attn_implementation="eager").to(device)
    return peft.PeftModel.from_pretrained(base, adapter_dir).to(device).eval()


@torch.no_grad()
def hf_step_logits(model, prompt, tokens, device):
    ids = torch.tensor([prompt + tokens[:-1]], device=device)
    return model(input_ids=ids).logits[0, -len(tokens):].float().cpu().numpy()


def run_lora(binary, base_dir, adapter_dir, rank, mode, device, dtype, prompt, steps, out_npy):
    """`inferbench generate` with the adapter unmerged, or merged (--merge-lora)."""
    extra = ["--lora-modules", f"a={adapter_dir}", "--max-lora-rank", str(rank)]
    if mode == "merged":
        extra.append("--merge-lora")
    return run_inferbench(binary, base_dir, device, dtype, prompt, steps, out_npy, extra)


def save_json(args, rows):
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, args.json_name)
    import peft
    with open(path + ".tmp", "w") as f:
        json.dump(dict(transformers=transformers.__version__, torch=torch.__version__,
                       peft=peft.__version__, tolerance=TOLERANCE, steps=args.steps,
                       layers=args.layers, targets=TARGETS,
                       reference="base from_pretrained(saved bf16 files, dtype=float32) + "
                                 "PeftModel.from_pretrained(saved fp32 adapter), unmerged, "
                                 "eager, TF32 off", rows=rows), f, indent=2)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap)
    ap.add_argument("--families", default="llama-3,qwen2")
    ap.add_argument("--ranks", default="8,64")
    ap.add_argument("--modes", default="unmerged,merged")
    ap.add_argument("--runs", default="cpu:fp32,cuda:fp32,cuda:bf16",
                    help="backend:dtype pairs to compare")
    ap.add_argument("--prompt-lens", default="24,512")
    ap.add_argument("--hf-device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json-name", default="hf_compare_lora.json")
    args = ap.parse_args()
    ieee_fp32()
    runs = [tuple(r.split(":")) for r in args.runs.split(",")]
    lengths = [int(x) for x in args.prompt_lens.split(",")]
    rows, ok = [], True
    for name in args.families.split(","):
        with tempfile.TemporaryDirectory(prefix=f"hfcmp-lora-{name}-") as tmp:
            base_dir = os.path.join(tmp, "base")
            try:
                save_base(name, args.layers, args.seed, base_dir, args.hf_device)
                for rank in [int(r) for r in args.ranks.split(",")]:
                    adapter_dir = os.path.join(tmp, f"lora-r{rank}")
                    save_adapter(base_dir, adapter_dir, rank, args.seed, args.hf_device)
                    model = load_reference(base_dir, adapter_dir, args.hf_device)
                    vocab = model.config.vocab_size
                    rng = np.random.default_rng(args.seed)
                    for length in lengths:
                        prompt = [int(x) for x in rng.integers(0, vocab, size=length)]
                        ref = None
                        for mode in args.modes.split(","):
                            for device, dtype in runs:
                                row = dict(family=name, rank=rank, mode=mode, backend=device,
                                           dtype=dtype, prompt_len=length, layers=args.layers)
                                try:
                                    tokens, logits, secs = run_lora(
                                        args.inferbench, base_dir, adapter_dir, rank, mode,
                                        device, dtype, prompt, args.steps,
                                        os.path.join(tmp, "logits.npy"))
                                except Refused as e:
                                    rows.append(dict(row, skipped=f"refused: {e}"))
                                    print(f"{name} r{rank} {mode} {device} {dtype} {length}: "
                                          f"refused: {e}", flush=True)
                                    save_json(args, rows)
                                    continue
                                if ref is None or ref[0] != tokens:
                                    ref = (tokens, hf_step_logits(model, prompt, tokens,
                                                                  args.hf_device))
                                r = dict(row, steps=len(tokens), seconds=round(secs, 2),
                                         **compare(ref[1], tokens, logits))
                                r["tolerance"] = TOLERANCE[dtype]
                                r["passed"] = r["max_rel_l2"] <= TOLERANCE[dtype]
                                ok &= r["passed"]
                                rows.append(r)
                                save_json(args, rows)
                                print(f"{name} r{rank} {mode} {device} {dtype} {length}: max rel "
                                      f"L2 {r['max_rel_l2']:.2e} ({secs:.1f} s)", flush=True)
                    del model
            except Exception as e:  # report and go on with the next family
                ok = False
                rows.append(dict(family=name, error=describe_error(e)[-800:], passed=False))
                print(f"{name}: ERROR {describe_error(e)[-600:]}", flush=True)
    save_json(args, rows)
    print(f"\nhf_compare_lora (transformers {transformers.__version__}, torch "
          f"{torch.__version__}; {args.layers} layers, {args.steps} greedy steps, relative L2 "
          f"of every step's logits against HF + peft in fp32)")
    print_table(rows, ["family", "rank", "mode", "backend", "dtype", "prompt_len"], mean=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
