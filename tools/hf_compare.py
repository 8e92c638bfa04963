#!/usr/bin/env python3
"""inferbench against HF transformers on the very same safetensors files.

For Llama-3, Qwen2 and Mistral shapes (the real hidden size, heads, KV heads, FFN and vocabulary;
fewer layers to keep it quick) this builds the HF model from a config with seeded random weights,
saves it with save_pretrained (safetensors, bf16), and runs `inferbench generate` on that
directory in fp32 and bf16. HF's fp32 logits are then computed teacher-forced on the tokens
inferbench chose (one forward pass over prompt + generated tokens; eager attention, TF32 off),
so that:
  - fp32: greedy tokens are identical iff HF's argmax at every step equals inferbench's token;
  - bf16: each step's logits are within a relative L2 error of 2e-2 of HF's fp32 logits.
Prints a table and writes JSON.

Usage (GPU machine): tools/hf_compare.py --inferbench build/bin/inferbench --out DIR
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers

SHAPES = {
    # name: (config class, kwargs)
    "llama-3": ("LlamaConfig", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, rope_theta=500000.0, rms_norm_eps=1e-5,
        max_position_embeddings=8192, bos_token_id=128000, eos_token_id=128001)),
    "qwen2": ("Qwen2Config", dict(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
        num_key_value_heads=4, rope_theta=1000000.0, rms_norm_eps=1e-6,
        max_position_embeddings=32768, use_sliding_window=False, tie_word_embeddings=False)),
    "mistral": ("MistralConfig", dict(
        vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, rope_theta=1000000.0, rms_norm_eps=1e-5,
        max_position_embeddings=32768, sliding_window=None)),
}
BF16_TOLERANCE = 2e-2
STEPS = 32


def build_model(name, layers, seed, directory):
    cls_name, kwargs = SHAPES[name]
    config = getattr(transformers, cls_name)(num_hidden_layers=layers, **kwargs)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        # Eager attention: plain fp32 matmuls for the reference (SDPA may use other kernels).
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    # Larger than HF's 0.02 init so that logits spread (and greedy ties are improbable).
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5 if "embed" not in n else 1.0)
            elif "norm" in n:
                p.uniform_(0.8, 1.2)
            else:  # biases
                p.uniform_(-0.1, 0.1)
    model = model.to(torch.bfloat16)
    model.save_pretrained(directory)  # safetensors
    return model.to(torch.float32).eval()


def run_inferbench(binary, directory, dtype, prompt, out_npy):
    cmd = [binary, "generate", "--model", directory, "--device", "cuda", "--dtype", dtype,
           "--load-format", "safetensors", "--prompt-token-ids", ",".join(map(str, prompt)),
           "--max-tokens", str(STEPS), "--dump-logits", out_npy]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"inferbench failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["token_ids"], np.load(out_npy), time.time() - t0


@torch.no_grad()
def hf_logits(model, tokens):
    ids = torch.tensor([tokens], device="cuda")
    return model(ids).logits[0].float().cpu().numpy()  # (len, vocab)


def compare(model, prompt, tokens, logits):
    ref = hf_logits(model, prompt + tokens)[len(prompt) - 1: len(prompt) - 1 + len(tokens)]
    rel = np.linalg.norm(logits - ref, axis=1) / np.linalg.norm(ref, axis=1)
    hf_argmax = ref.argmax(axis=1)
    first_mismatch = next((i for i, (a, b) in enumerate(zip(hf_argmax, tokens)) if a != b), None)
    return dict(max_rel_l2=float(rel.max()), mean_rel_l2=float(rel.mean()),
                greedy_equal_steps=len(tokens) if first_mismatch is None else first_mismatch)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inferbench", default="build/bin/inferbench")
    ap.add_argument("--out", default=".")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    # PyTorch >= 2.9 also has per-backend fp32 precision settings; ask for IEEE fp32 there too.
    for backend in (getattr(torch.backends.cuda, "matmul", None), torch.backends.cudnn):
        if backend is not None and hasattr(backend, "fp32_precision"):
            backend.fp32_precision = "ieee"
    rows, ok = [], True
    for name in args.shapes.split(","):
        with tempfile.TemporaryDirectory(prefix=f"hfcmp-{name}-") as d:
            try:
                model = build_model(name, args.layers, args.seed, d)
                vocab = model.config.vocab_size
                rng = np.random.default_rng(args.seed)
                prompt = [int(x) for x in rng.integers(0, vocab, size=24)]
                for dtype in ("fp32", "bf16"):
                    tokens, logits, secs = run_inferbench(
                        args.inferbench, d, dtype, prompt, os.path.join(d, f"{dtype}.npy"))
                    r = dict(shape=name, layers=args.layers, dtype=dtype, steps=len(tokens),
                             seconds=round(secs, 2), **compare(model, prompt, tokens, logits))
                    if dtype == "fp32":
                        r["passed"] = r["greedy_equal_steps"] == STEPS
                    else:
                        r["passed"] = r["max_rel_l2"] <= BF16_TOLERANCE
                    ok &= r["passed"]
                    rows.append(r)
                del model
                torch.cuda.empty_cache()
            except Exception as e:  # report and go on with the next shape
                ok = False
                rows.append(dict(shape=name, error=str(e)[-800:], passed=False))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "hf_compare.json"), "w") as f:
        json.dump(dict(transformers=transformers.__version__, torch=torch.__version__,
                       bf16_tolerance=BF16_TOLERANCE, steps=STEPS, rows=rows), f, indent=2)
    print(f"hf_compare (transformers {transformers.__version__}, torch {torch.__version__}; "
          f"HF fp32 reference, TF32 off; {STEPS} greedy steps)")
    print("| shape | dtype | max rel L2 | mean rel L2 | greedy = HF (steps) | result |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for r in rows:
        if "error" in r:
            print(f"| {r['shape']} | - | - | - | - | ERROR: {r['error'][:200]} |")
            continue
        print(f"| {r['shape']} | {r['dtype']} | {r['max_rel_l2']:.2e} | {r['mean_rel_l2']:.2e} "
              f"| {r['greedy_equal_steps']}/{r['steps']} | {'pass' if r['passed'] else 'FAIL'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
