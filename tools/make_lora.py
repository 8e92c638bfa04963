#!/usr/bin/env python3
"""A random LoRA adapter in PEFT's saved layout, with nothing but the standard library.

Writes DIR/adapter_config.json and DIR/adapter_model.safetensors (fp32 tensors named
base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight (r, in) / lora_B.weight (out, r),
and likewise for k/v/o_proj and mlp.gate/up/down_proj), for a model described by its HF
config.json or by its sizes. lora_A ~ U(-a, a) with a = sqrt(3 / in) and lora_B ~ U(-b, b), b
chosen so that the update (alpha / r) B A x is about --update-std for unit inputs: an adapter
that visibly changes the model, for examples and benchmarks (peft would leave B at zero).

  tools/make_lora.py --config MODEL_DIR/config.json --rank 8 --out adapters/sql
  tools/make_lora.py --hidden-size 288 --intermediate-size 768 --num-heads 6 --num-kv-heads 6 \\
      --layers 6 --rank 8 --out adapters/sql

--numpy draws the same distributions with numpy's generator (a different stream: other values
for the same seed) in seconds where the standard library takes minutes for an 8B model's adapter.
"""
import argparse
import json
import os
import random
import struct

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def shapes(d, f, q, kv):
    """(in, out) of each target."""
    return {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
            "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}


def write_safetensors(path, tensors):
    """tensors: [(name, shape, list of floats or their little-endian f32 bytes)] as F32, 8-byte
    aligned data section."""
    header, offset = {}, 0
    for name, shape, values in tensors:
        size = len(values) if isinstance(values, bytes) else 4 * len(values)
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path + ".tmp", "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for _, _, values in tensors:
            out.write(values if isinstance(values, bytes) else
                      struct.pack(f"<{len(values)}f", *values))
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="the base model's HF config.json")
    ap.add_argument("--hidden-size", type=int)
    ap.add_argument("--intermediate-size", type=int)
    ap.add_argument("--num-heads", type=int)
    ap.add_argument("--num-kv-heads", type=int)
    ap.add_argument("--head-dim", type=int, default=0, help="default: hidden / heads")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=0, help="default: 2 x rank")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--use-rslora", action="store_true")
    ap.add_argument("--update-std", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-model", default="", help="recorded as base_model_name_or_path")
    ap.add_argument("--out", required=True)
    ap.add_argument("--numpy", action="store_true", help="draw with numpy (fast; other values)")
    args = ap.parse_args()
    if args.config:
        with open(args.config) as f:
            c = json.load(f)
        d, f_, heads = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]
        kv_heads, layers = c.get("num_key_value_heads", heads), c["num_hidden_layers"]
        head_dim = c.get("head_dim") or d // heads
        base = args.base_model or os.path.dirname(os.path.abspath(args.config))
    else:
        d, f_, heads = args.hidden_size, args.intermediate_size, args.num_heads
        kv_heads, layers = args.num_kv_heads or heads, args.layers
        head_dim = args.head_dim or d // heads
        base = args.base_model
    r = args.rank
    alpha = args.alpha or 2.0 * r
    scale = alpha / (r ** 0.5 if args.use_rslora else r)
    rng = random.Random(args.seed)
    if args.numpy:
        import numpy as np
        gen = np.random.default_rng(args.seed)

        def uniform(bound, n):  # float32 bytes, packed as write_safetensors would
            return gen.uniform(-bound, bound, n).astype("<f4").tobytes()
    else:
        def uniform(bound, n):
            return [rng.uniform(-bound, bound) for _ in range(n)]
    targets = args.targets.split(",")
    tensors = []
    for layer in range(layers):
        for t in targets:
            n_in, n_out = shapes(d, f_, heads * head_dim, kv_heads * head_dim)[t]
            a, b = (3.0 / n_in) ** 0.5, args.update_std * 3 ** 0.5 / (scale * r ** 0.5)
            module = ("self_attn." if t in TARGETS[:4] else "mlp.") + t
            name = f"base_model.model.model.layers.{layer}.{module}"
            tensors.append((name + ".lora_A.weight", (r, n_in), uniform(a, r * n_in)))
            tensors.append((name + ".lora_B.weight", (n_out, r), uniform(b, n_out * r)))
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "adapter_model.safetensors"), tensors)
    with open(os.path.join(args.out, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha,
                   "lora_dropout": 0.0, "target_modules": targets, "bias": "none",
                   "use_rslora": args.use_rslora, "modules_to_save": None,
                   "base_model_name_or_path": base}, f, indent=2)
    print(f"{args.out}: rank {r}, alpha {alpha:g}, {len(targets)} targets x {layers} layers")


if __name__ == "__main__":
    main()
