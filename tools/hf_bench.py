#!/usr/bin/env python3
"""The seed's protocol with HF transformers (eager) on this GPU, for the ratio to inferbench.

Llama-3-8B config, random init in bf16 on the GPU, static batches of --batch-size prompts of
--input-len random token ids, greedy generation of exactly --output-len tokens (EOS ignored),
attn_implementation="eager". One warm-up batch, then --batches timed batches; output tok/s =
generated tokens / wall time of the timed batches (synchronized). TTFT is one generate() call
with max_new_tokens=1 per batch. Writes JSON and prints one line.

Usage (GPU machine): tools/hf_bench.py --out DIR [--batches 3]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import transformers

LLAMA_3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                  rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192,
                  bos_token_id=128000, eos_token_id=128001)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    config = transformers.LlamaConfig(**LLAMA_3_8B)
    config._attn_implementation = "eager"
    t0 = time.time()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model.eval()
    init_s = time.time() - t0
    gen = dict(do_sample=False, min_new_tokens=args.output_len, max_new_tokens=args.output_len,
               pad_token_id=0, eos_token_id=None)

    def batch(i):
        g = torch.Generator().manual_seed(args.seed * 1000 + i)
        return torch.randint(0, config.vocab_size, (args.batch_size, args.input_len),
                             generator=g).cuda()

    @torch.no_grad()
    def run(ids, new_tokens):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids),
                             **{**gen, "min_new_tokens": new_tokens, "max_new_tokens": new_tokens})
        torch.cuda.synchronize()
        return time.perf_counter() - start, out.shape[1] - ids.shape[1]

    run(batch(-1), args.output_len)  # warm-up
    walls, ttfts, generated = [], [], 0
    for i in range(args.batches):
        ids = batch(i)
        ttfts.append(run(ids, 1)[0])
        wall, n = run(ids, args.output_len)
        walls.append(wall)
        generated += n * args.batch_size
    result = dict(
        system="HF transformers eager", transformers=transformers.__version__,
        torch=torch.__version__, device=torch.cuda.get_device_name(), model="llama-3-8b (random "
        "init, bf16)", batch_size=args.batch_size, input_len=args.input_len,
        output_len=args.output_len, warmup_batches=1, timed_batches=args.batches,
        output_tokens=generated, wall_s=sum(walls),
        output_throughput_tok_s=generated / sum(walls),
        median_ttft_ms=1000 * statistics.median(ttfts),
        median_batch_s=statistics.median(walls), init_s=init_s)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "hf_bench.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"hf_bench: {result['output_throughput_tok_s']:.1f} output tok/s, median TTFT "
          f"{result['median_ttft_ms']:.1f} ms ({args.batches} timed batches of {args.batch_size}, "
          f"in {args.input_len} / out {args.output_len}, transformers {transformers.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
