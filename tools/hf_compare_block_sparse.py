#!/usr/bin/env python3
"""inferbench's block-sparse attention against HF transformers with the same pattern as a mask.

transformers has no local + strided block-sparse attention for Llama, but its models take a 4-D
attention mask as given: the reference is LlamaForCausalLM at Llama-3-8B's sizes (fewer layers),
with random weights saved by save_pretrained and reloaded from those files in fp32 (eager
attention, TF32 off; hf_compare.py says why), run on an additive (1, 1, L, L) mask that is 0 where
a query sees a key and the dtype's minimum elsewhere. The pattern is spelled out here from its
definition (vLLM's blocksparse layout, Phi-3-small's config): a query in block qb sees key block
kb <= qb when qb - kb < local_blocks or (kb + 1) % vert_stride == 0, and causally within.

Two checks that the mask does what it should, per prompt: the dense causal mask given as a 4-D
mask reproduces transformers' own causal run (so the mask's form is the one the model reads), and
the block-sparse mask moves the logits (the "pattern effect" column: relative L2 of HF sparse
against HF dense) by more than the fp32 tolerance, so agreement is not agreement with dense.

`inferbench generate --block-sparse-attention ...` runs each backend and dtype greedily; HF is
teacher-forced on its tokens; every step's logits are compared by relative L2 (fp32 <= 1e-4,
bf16 <= 1e-2). Prints a Markdown table and writes JSON.

Usage (GPU machine): tools/hf_compare_block_sparse.py --inferbench BIN --out DIR
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
import transformers

from hf_compare import (TOLERANCE, add_common_args, compare, describe_error, load_reference,
                        print_table, run_inferbench, save_random_model)
from hf_models import ieee_fp32

# (pattern as the flag takes it, prompt lengths): a small band at 300 to 4,096 tokens, and
# Phi-3-small's pattern (blocks of 64, a band of 16, every 8th block) at 4,096.
CASES = [
    ("local_blocks=4,vert_stride=4,block_size=64", (300, 2048, 4096)),
    ("local_blocks=16,vert_stride=8,block_size=64", (4096,)),
]


def parse_pattern(text):
    items = dict(kv.split("=") for kv in text.split(","))
    return int(items.get("block_size", 64)), int(items["local_blocks"]), int(items["vert_stride"])


def sparse_mask(length, pattern):
    """(1, 1, L, L) additive mask: 0 where query i sees key j under the pattern, else -inf-ish."""
    block, local, stride = parse_pattern(pattern)
    pos = torch.arange(length)
    qb, kb = (pos // block)[:, None], (pos // block)[None, :]
    seen = (pos[None, :] <= pos[:, None]) & ((qb - kb < local) | ((kb + 1) % stride == 0))
    mask = torch.zeros(length, length)
    mask.masked_fill_(~seen, torch.finfo(torch.float32).min)
    return mask[None, None]


def causal_mask(length):
    mask = torch.full((length, length), torch.finfo(torch.float32).min).triu(1)
    return mask[None, None]


@torch.no_grad()
def hf_logits(model, ids, steps, mask=None):
    """Logits of the last `steps` positions of ids (1, L), under mask when given."""
    kwargs = {} if mask is None else dict(attention_mask=mask.to("cuda"))
    out = model(torch.tensor([ids], device="cuda"), logits_to_keep=steps, **kwargs)
    return out.logits[0].float().cpu().numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap)
    ap.add_argument("--runs", default="cuda:fp32,cuda:bf16,cpu:fp32")
    ap.add_argument("--cpu-max-len", type=int, default=4096)
    args = ap.parse_args()
    ieee_fp32()
    runs = [tuple(r.split(":")) for r in args.runs.split(",")]
    rows, ok = [], True
    with tempfile.TemporaryDirectory(prefix="hfcmp-sparse-") as d:
        save_random_model("llama-3", args.layers, args.seed, d)
        model, _ = load_reference(d)
        vocab = model.config.vocab_size
        rng = np.random.default_rng(args.seed)
        for pattern, lengths in CASES:
            for length in lengths:
                prompt = [int(x) for x in rng.integers(0, vocab, size=length)]
                ref = None
                for device, dtype in runs:
                    row = dict(family="llama-3", pattern=pattern, backend=device, dtype=dtype,
                               prompt_len=length)
                    if device == "cpu" and length > args.cpu_max_len:
                        rows.append(dict(row, skipped=f"CPU rows stop at {args.cpu_max_len}"))
                        continue
                    try:
                        tokens, logits, secs = run_inferbench(
                            args.inferbench, d, device, dtype, prompt, args.steps,
                            os.path.join(d, f"{device}-{dtype}.npy"),
                            ("--block-sparse-attention", pattern))
                        if ref is None or ref[0] != tokens:
                            ids = prompt + tokens[:-1]
                            total = len(ids)
                            sparse = hf_logits(model, ids, len(tokens),
                                               sparse_mask(total, pattern))
                            dense = hf_logits(model, ids, len(tokens))
                            as_mask = hf_logits(model, ids, len(tokens), causal_mask(total))
                            ref = (tokens, sparse, compare(dense, tokens, sparse)["max_rel_l2"],
                                   compare(dense, tokens, as_mask)["max_rel_l2"])
                        r = dict(row, steps=len(tokens), seconds=round(secs, 2),
                                 **compare(ref[1], tokens, logits))
                        r["pattern_effect_rel_l2"] = ref[2]
                        r["causal_as_4d_mask_rel_l2"] = ref[3]
                        r["tolerance"] = TOLERANCE[dtype]
                        # The mask is read as given (dense as 4-D = dense), and the pattern moves
                        # the logits past the fp32 tolerance.
                        r["mask_checks"] = ref[3] <= 1e-6 and ref[2] > TOLERANCE["fp32"]
                        r["passed"] = r["max_rel_l2"] <= TOLERANCE[dtype] and r["mask_checks"]
                    except Exception as e:  # report and go on
                        r = dict(row, error=describe_error(e)[-600:], passed=False)
                    ok &= bool(r["passed"])
                    rows.append(r)
                    print(json.dumps(r), flush=True)
        del model
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "hf_compare_block_sparse.json"), "w") as f:
        json.dump(dict(transformers=transformers.__version__, torch=torch.__version__,
                       tolerance=TOLERANCE, steps=args.steps, layers=args.layers,
                       reference="from_pretrained(saved bf16 files, dtype=float32), eager, TF32 "
                                 "off, the pattern as an additive 4-D attention mask",
                       rows=rows), f, indent=2)
    print(f"\nhf_compare_block_sparse (transformers {transformers.__version__}; {args.layers} "
          f"layers of Llama-3-8B's sizes, {args.steps} greedy steps)")
    for r in rows:
        if "pattern_effect_rel_l2" in r:
            r["family"] = f"llama-3, {r['pattern']} (effect {r['pattern_effect_rel_l2']:.1e})"
    print_table(rows, ["family", "backend", "dtype", "prompt_len"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
