#!/usr/bin/env python3
"""inferbench's 4-bit unpacking against torch packers written from each format's public description.

A tiny Llama (hidden 128, FFN 256, 2 layers, 4 heads, 2 KV heads, vocabulary 256) gets seeded
random weights. Each layer's q/k/v/o/gate/up/down weight W (N, K) is quantized by round to nearest
in torch and written in a published layout, with config.json's quantization_config:
  - awq: AutoAWQ GEMM. qweight int32 (K, N/8), word c of row k packing columns 8c + [0, 2, 4, 6,
    1, 3, 5, 7] at bits 0, 4, ..., 28; qzeros int32 (K/G, N/8) the same; scales f16 (K/G, N).
  - gptq-v1-actorder: GPTQ, desc_act, sym. qweight int32 (K/8, N), row r packing input features
    8r..8r+7 at bits 0..28; qzeros int32 (K/G, N/8), columns 8c..8c+7, storing z - 1;
    scales f16 (K/G, N); g_idx int32 (K) a shuffled assignment of G features per group.
  - gptq-v2-asym: GPTQ checkpoint_format "gptq_v2", sym false: qzeros store z itself.
  - ct-w4a16-asym / ct-w4a16-sym-channel: compressed-tensors "pack-quantized". weight_packed int32
    (N, K/8), features 8c..8c+7 at bits 0..28, each signed q + 8; weight_scale (N, K/G) or (N, 1);
    weight_zero_point int32 (N/8, K/G) packed along N (asymmetric only); weight_shape [N, K].
  - nf4: bitsandbytes, double quantization. weight uint8 (N K/2, 1), element 2j in the high nibble;
    absmax uint8 codes into nested_quant_map (256) times nested_absmax (one per 256 blocks) plus
    nested_offset; quant_map (16); quant_state.bitsandbytes__nf4 the JSON bytes.
The values each format stands for (awq/gptq/ct: (q - z) * s per group, nf4: level[q] * absmax)
are written as a dense fp32 checkpoint beside it. `inferbench generate --dump-logits` runs both
greedily; the packed model must give the dense model's tokens and logits (max |diff| <= 1e-3, fp32
CPU: the same values, summed in another order only with act-order). Exit 1 when one differs.

Usage (needs torch and numpy): tools/int4_pack_check.py --inferbench build/bin/inferbench
  --out DIR [--device cpu]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

H, F, LAYERS, HEADS, KV, HD, VOCAB = 128, 256, 2, 4, 2, 32, 256
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
       -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
       0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
       0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
ST_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.int32: "I32", torch.uint8: "U8",
            torch.int64: "I64"}


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def pack8(v, dim):
    """Eight 4-bit values along dim into one int32, value i at bits 4i."""
    v = v.to(torch.int64).movedim(dim, -1)
    v = v.reshape(*v.shape[:-1], v.shape[-1] // 8, 8)
    word = sum(v[..., i] << (4 * i) for i in range(8))
    word = torch.where(word >= 2**31, word - 2**32, word)
    return word.to(torch.int32).movedim(-1, dim)


def rtn(w, g, g_idx, zero_points):
    """codes q (N, K), scales f16 (N, K/G), zeros (N, K/G) of groups g_idx, by round to nearest."""
    n, k = w.shape
    q = torch.zeros(n, k, dtype=torch.int64)
    s = torch.zeros(n, k // g, dtype=torch.float16)
    z = torch.zeros(n, k // g, dtype=torch.int64)
    for j in range(k // g):
        cols = (g_idx == j).nonzero().flatten()
        wg = w[:, cols]
        lo, hi = wg.min(1).values.clamp(max=0), wg.max(1).values.clamp(min=0)
        if zero_points:
            sj = ((hi - lo).clamp(min=1e-4) / 15).half()
            zj = torch.round(-lo / sj.float()).clamp(0, 15).long()
        else:
            sj = (torch.maximum(hi, -lo).clamp(min=1e-4) / 7).half()
            zj = torch.full((n,), 8, dtype=torch.int64)
        s[:, j], z[:, j] = sj, zj
        q[:, cols] = (torch.round(wg / sj.float()[:, None]) + zj[:, None]).clamp(0, 15).long()
    value = (q - z[:, g_idx]).float() * s.float()[:, g_idx]
    return q, s, z, value


def int4_layout(name, w, g, act_order, gen):
    n, k = w.shape
    g = g or k
    g_idx = torch.arange(k) // g
    if act_order:
        g_idx = g_idx[torch.randperm(k, generator=gen)]
    zero_points = name in ("awq", "gptq-v2-asym", "ct-w4a16-asym")
    q, s, z, value = rtn(w, g, g_idx, zero_points)
    if name == "awq":
        order = [8 * c + o for c in range(n // 8) for o in AWQ_ORDER]
        return {"qweight": pack8(q.t()[:, order], 1), "qzeros": pack8(z.t()[:, order], 1),
                "scales": s.t().contiguous()}, value
    if name.startswith("gptq"):
        stored = (z - 1) & 0xF if name.startswith("gptq-v1") else z
        return {"qweight": pack8(q.t(), 0), "qzeros": pack8(stored.t(), 1),
                "scales": s.t().contiguous(), "g_idx": g_idx.to(torch.int32)}, value
    out = {"weight_packed": pack8(q, 1), "weight_scale": s.float(),
           "weight_shape": torch.tensor([n, k], dtype=torch.int64)}
    if zero_points:
        out["weight_zero_point"] = pack8(z, 0)
    return out, value


def nf4_layout(w):
    n, k = w.shape
    blocks = w.reshape(-1, 64)
    absmax = blocks.abs().max(1).values
    absmax = torch.where(absmax == 0, torch.ones_like(absmax), absmax)
    levels = torch.tensor(NF4)
    codes = ((blocks / absmax[:, None])[..., None] - levels).abs().argmin(-1)
    offset = absmax.mean()
    code2 = torch.linspace(-1, 1, 256)
    centred = (absmax - offset).reshape(-1)
    absmax2 = torch.stack([c.abs().max() for c in centred.split(256)])
    scale2 = absmax2.repeat_interleave(256)[: centred.numel()]
    qabs = ((centred / scale2)[:, None] - code2).abs().argmin(-1)
    kept = code2[qabs] * scale2 + offset
    flat = codes.reshape(-1)
    state = {"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [n, k],
             "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": offset.item()}
    tensors = {"": ((flat[0::2] << 4) | flat[1::2]).to(torch.uint8).reshape(-1, 1),
               ".absmax": qabs.to(torch.uint8), ".nested_absmax": absmax2,
               ".nested_quant_map": code2, ".quant_map": levels,
               ".quant_state.bitsandbytes__nf4": torch.tensor(list(json.dumps(state).encode()),
                                                              dtype=torch.uint8)}
    return tensors, (levels[codes] * kept[:, None]).reshape(n, k)


LAYOUTS = {  # name: (quantization_config, --quantization)
    "awq": ({"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm",
             "zero_point": True}, "awq"),
    "gptq-v1-actorder": ({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True,
                          "sym": True}, "gptq"),
    "gptq-v2-asym": ({"quant_method": "gptq", "bits": 4, "group_size": 64, "sym": False,
                      "checkpoint_format": "gptq_v2"}, "gptq"),
    "ct-w4a16-asym": ({"quant_method": "compressed-tensors", "format": "pack-quantized",
                       "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                           "num_bits": 4, "type": "int", "symmetric": False, "strategy": "group",
                           "group_size": 32}}}}, "awq"),
    "ct-w4a16-sym-channel": ({"quant_method": "compressed-tensors", "format": "pack-quantized",
                              "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                                  "num_bits": 4, "type": "int", "symmetric": True,
                                  "strategy": "channel"}}}}, "gptq"),
    "nf4": ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
             "bnb_4bit_use_double_quant": True}, "nf4"),
}


def config_json(quantization_config=None):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
         "intermediate_size": F, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
         "num_key_value_heads": KV, "head_dim": HD, "vocab_size": VOCAB,
         "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "torch_dtype": "float32", "eos_token_id": VOCAB - 1}
    if quantization_config:
        c["quantization_config"] = quantization_config
    return c


def write_pair(out, name, gen):
    qc, flag = LAYOUTS[name]
    group = qc.get("group_size", qc.get("config_groups", {}).get("group_0", {})
                   .get("weights", {}).get("group_size", 0))
    dense = {"model.embed_tokens.weight": torch.randn(VOCAB, H, generator=gen),
             "model.norm.weight": 1 + 0.1 * torch.randn(H, generator=gen),
             "lm_head.weight": torch.randn(VOCAB, H, generator=gen) / H**0.5}
    packed = dict(dense)
    shapes = {"self_attn.q_proj": (HEADS * HD, H), "self_attn.k_proj": (KV * HD, H),
              "self_attn.v_proj": (KV * HD, H), "self_attn.o_proj": (H, HEADS * HD),
              "mlp.gate_proj": (F, H), "mlp.up_proj": (F, H), "mlp.down_proj": (H, F)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        for norm in ("input_layernorm", "post_attention_layernorm"):
            dense[p + norm + ".weight"] = packed[p + norm + ".weight"] = 1 + 0.1 * torch.randn(H, generator=gen)
        perm_seed = {}  # q/k/v and gate/up share an input, so one act-order g_idx each
        for proj, (n, k) in shapes.items():
            w = torch.randn(n, k, generator=gen) / k**0.5
            shared = "qkv" if proj.split(".")[1] in ("q_proj", "k_proj", "v_proj") else (
                "gate_up" if proj.split(".")[1] in ("gate_proj", "up_proj") else proj)
            perm_seed.setdefault(shared, int(torch.randint(0, 2**31, (1,), generator=gen)))
            if flag == "nf4":
                tensors, value = nf4_layout(w)
                packed.update({p + proj + ".weight" + s: t for s, t in tensors.items()})
            else:
                local = torch.Generator().manual_seed(perm_seed[shared])
                tensors, value = int4_layout(name, w, group, qc.get("desc_act", False), local)
                packed.update({p + proj + "." + s: t for s, t in tensors.items()})
            dense[p + proj + ".weight"] = value
    for sub, tensors, qconf in ((name, packed, qc), (name + "-dense", dense, None)):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        with open(os.path.join(out, sub, "config.json"), "w") as f:
            json.dump(config_json(qconf), f, indent=1)
        save_safetensors(os.path.join(out, sub, "model.safetensors"), tensors)
    return flag


def generate(binary, directory, device, flag, npy):
    cmd = [binary, "generate", "--model", directory, "--device", device, "--dtype", "fp32",
           "--load-format", "safetensors", "--prompt-token-ids", "3,141,59,26,53,58,97",
           "--max-tokens", "8", "--dump-logits", npy, "--quantization", flag]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return np.load(npy)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inferbench", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(14)
    rows, failed = [], False
    for name in LAYOUTS:
        flag = write_pair(args.out, name, gen)
        try:
            got = generate(args.inferbench, os.path.join(args.out, name), args.device, flag,
                           os.path.join(args.out, name + ".npy"))
            want = generate(args.inferbench, os.path.join(args.out, name + "-dense"), args.device,
                            "none", os.path.join(args.out, name + "-dense.npy"))
            diff = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
        except RuntimeError as e:
            print(e, file=sys.stderr)
            diff = float("inf")
        ok = diff <= 1e-3
        failed |= not ok
        rows.append({"layout": name, "quantization": flag, "max_abs_logit_diff": diff, "ok": ok})
        print(f"| {name} | --quantization {flag} | max |logit diff| {diff:.3g} | "
              f"{'ok' if ok else 'MISMATCH'} |")
    with open(os.path.join(args.out, "int4_pack_check.json"), "w") as f:
        json.dump({"device": args.device, "rows": rows}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
