#!/usr/bin/env python3
"""The seed's table 3.3 from a run of bench/seed-3.3.yaml: per image entry, its visual tokens,
the KV bytes a decode step reads per layer (all of the context and the visual tokens' part), TTFT
with its encoder / prefill split, and the visual tokens' share of TTFT and of the decode step,
measured against the entry's text-only twin (the entry named <model>-text: the same model and
text prompt without the image).

  KV bytes per token per layer = 2 (K and V) x kv heads x head_dim x 2 bytes (bf16), checked
      against the run's own mean_kv_bytes;
  KV read per layer per decode step = that x the mean context of the decode steps (prompt +
      output_len / 2 tokens), the visual part = that x visual tokens;
  visual share of TTFT = 1 - TTFT(twin) / TTFT(image), medians of the runs' medians;
  visual share of the decode step = 1 - TPOT(twin) / TPOT(image): the time the visual tokens'
      K/V add to every decode step (the attention's reads), measured;
  visual share of the KV read = visual tokens / mean context (what the decode attention reads).

Usage: vlm_summary.py DIR [--out FILE.md]
"""
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def row(name, r, twin):
    m = r["engine"]["model"]
    prompts = r["num_prompts"]
    prompt = r["total_input_tokens"] / prompts
    out = r["total_output_tokens"] / prompts
    visual = r.get("mean_visual_tokens", 0.0)
    per_token_layer = 2 * m["num_kv_heads"] * m["head_dim"] * 2
    measured = r.get("mean_kv_bytes", 0.0) / ((prompt + out) * m["num_layers"])
    context = prompt + out / 2
    ttft, tpot = r["median_ttft_ms"], r["median_tpot_ms"]
    cells = {
        "entry": name,
        "visual tokens": f"{visual:.0f}",
        "prompt tokens": f"{prompt:.0f}",
        "KV B/token/layer": f"{per_token_layer} ({measured:.0f} measured)",
        "KV read/layer/step": f"{per_token_layer * context / 1e6:.2f} MB",
        "visual KV read/layer/step": f"{per_token_layer * visual / 1e6:.2f} MB",
        "TTFT ms": f"{ttft:.2f}",
        "encode ms": f"{r.get('median_encode_ms', 0.0):.2f}",
        "prefill ms": f"{r.get('median_ttft_prefill_ms', 0.0):.2f}",
        "TPOT ms": f"{tpot:.3f}",
        "visual share TTFT": "-",
        "visual share decode step": "-",
        "visual share KV read": f"{visual / context:.1%}",
    }
    if twin is not None:
        cells["visual share TTFT"] = f"{1 - twin['median_ttft_ms'] / ttft:.1%}"
        cells["visual share decode step"] = f"{1 - twin['median_tpot_ms'] / tpot:.1%}"
        cells["TTFT ms"] += f" (text {twin['median_ttft_ms']:.2f})"
        cells["TPOT ms"] += f" (text {twin['median_tpot_ms']:.3f})"
    return cells


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    root = args[0]
    out_path = args[args.index("--out") + 1] if "--out" in args else None
    results = {}
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "result.json")
        if os.path.isfile(path):
            results[name] = load(path)
    rows = []
    for name, r in results.items():
        if name.endswith("-text") or not r.get("mean_visual_tokens"):
            continue
        twin = results.get(name.rsplit("-", 1)[0] + "-text")
        rows.append(row(name, r, twin))
    if not rows:
        sys.exit(f"{root}: no entry with visual tokens (a run of bench/seed-3.3.yaml?)")
    keys = list(rows[0].keys())
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(r[k] for k in keys) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out_path:
        with open(out_path, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
