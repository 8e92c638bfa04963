#!/usr/bin/env python3
"""Qwen2-VL against transformers (issue 17): pixel values and the whole model's logits.

A tiny Qwen2VLForConditionalGeneration ("qwen2vl-tiny": a vision tower of depth 2, embed_dim 64,
4 heads, 14 px patches merged 2 x 2; a 2-layer Qwen2 of hidden 64 with M-RoPE sections [2, 3, 3])
with seeded random weights is saved by transformers (safetensors) with a Qwen2-VL
preprocessor_config.json, and reloaded in fp32 from the saved files. One PNG goes through both,
for each Qwen2-VL image processor class transformers has (torchvision, PIL backends):
  - the pixel values (patch rows) and grid must agree, within 1e-5;
  - the logits after every token of a prompt text + <|vision_start|> image <|vision_end|> + text
    (the image's placeholder expanded to grid_t grid_h grid_w / 4 tokens) must agree within a
    relative L2 of 1e-4 (fp32), inferbench's side being the engine on the CPU backend
    (bench/vision/qwen2vl_logits: the vision tower, the merger, Qwen2 with M-RoPE positions).
The saved tensor names are recorded (the engine reads transformers 5's model.visual. /
model.language_model. layout and the published files' visual. / model. one). Writes
qwen2vl.json; exit 1 on a mismatch or when nothing could be compared.

Usage: tools/compare_qwen2vl.py --tool build/.../qwen2vl_logits --out DIR
"""
import argparse
import inspect
import json
import os
import sys

import numpy as np
import torch
import transformers
from PIL import Image

from compare_pixel_values import processors  # tools/: this script's folder
from hf_models import ieee_fp32, load_fp32, randomize, run_tool

IMAGE_TOKEN, VIDEO_TOKEN, VISION_START, VISION_END = 300, 301, 302, 303
VOCAB = 320
PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor", "do_convert_rgb": True,
    "do_normalize": True, "do_rescale": True, "do_resize": True, "resample": 3,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "rescale_factor": 0.00392156862745098,
    "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 64,
    "size": {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 64},
    "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
}
VISION = dict(depth=2, embed_dim=64, hidden_size=64, hidden_act="quick_gelu", mlp_ratio=2,
              num_heads=4, in_channels=3, patch_size=14, spatial_merge_size=2,
              temporal_patch_size=2)
TEXT = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
            rms_norm_eps=1e-6, rope_theta=1000000.0, hidden_act="silu",
            tie_word_embeddings=False, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
TOKENS = dict(image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN,
              vision_start_token_id=VISION_START, vision_end_token_id=VISION_END)


def mrope_section(config):
    text = getattr(config, "text_config", None) or config
    for key in ("rope_parameters", "rope_scaling"):
        rope = getattr(text, key, None)
        if isinstance(rope, dict) and "mrope_section" in rope:
            return list(rope["mrope_section"])
    return None


def tiny_config():
    """transformers 5 (and late 4.x) take text_config; earlier 4.x read the text fields flat."""
    try:
        config = transformers.Qwen2VLConfig(text_config=dict(TEXT), vision_config=dict(VISION),
                                            tie_word_embeddings=False, **TOKENS)
        if getattr(config, "text_config", None) is None or \
                config.text_config.hidden_size != TEXT["hidden_size"]:
            raise TypeError("text_config not taken")
    except TypeError:
        config = transformers.Qwen2VLConfig(vision_config=dict(VISION), **TOKENS, **TEXT)
    if mrope_section(config) != [2, 3, 3]:
        raise SystemExit(f"transformers {transformers.__version__} built the tiny config without "
                         f"mrope_section [2, 3, 3] (got {mrope_section(config)})")
    return config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="build/.../bench/vision/qwen2vl_logits")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--pixel-tol", type=float, default=1e-5)
    ap.add_argument("--logit-tol", type=float, default=1e-4, help="relative L2, fp32")
    args = ap.parse_args()
    if not os.access(args.tool, os.X_OK):
        print(f"--tool {args.tool} is not an executable; build the qwen2vl_logits target")
        return 2
    ieee_fp32()
    model_dir = os.path.join(args.out, "qwen2vl-tiny")
    os.makedirs(model_dir, exist_ok=True)
    torch.manual_seed(args.seed)
    model = transformers.Qwen2VLForConditionalGeneration(tiny_config())
    randomize(model, args.seed)
    model.save_pretrained(model_dir, safe_serialization=True)
    json.dump(PREPROCESSOR, open(os.path.join(model_dir, "preprocessor_config.json"), "w"),
              indent=1)
    from safetensors import safe_open
    saved = []
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(model_dir, name), "pt") as f:
                saved += list(f.keys())
    saved.sort()
    if "lm_head.weight" not in saved:  # inferbench would read the model as untied
        raise SystemExit("transformers saved no lm_head.weight for an untied tiny model: "
                         f"{saved[:4]}...")
    vision_names = [n for n in saved if "visual" in n]
    print("saved tensors like:", vision_names[:2], [n for n in saved if "layers.0." in n][:2],
          f"({len(saved)} in all)")
    # From the saved files, as inferbench reads them; eager attention: plain softmax in fp32.
    ref = load_fp32(transformers.Qwen2VLForConditionalGeneration, model_dir,
                    attn_implementation="eager")
    rng = np.random.default_rng(args.seed)
    image_path = os.path.join(args.out, "qwen2vl_tiny_input.png")
    base = np.linspace(0, 255, 150)[None, :, None] * 0.5 + rng.integers(0, 128, (100, 150, 3))
    Image.fromarray(base.astype(np.uint8), "RGB").save(image_path)
    image = Image.open(image_path).convert("RGB")
    before, after = [5, 17, 42], [9, 77, 11, 200]
    rows, ok = [], True
    config = {k: v for k, v in PREPROCESSOR.items() if k != "image_processor_type"}
    seen = set()
    for backend, proc, cls_name in processors(config, family="Qwen2VL"):
        if backend in seen:  # an alias of a class already compared
            continue
        seen.add(backend)
        out = proc(images=image, return_tensors="pt")
        pixel_values = out["pixel_values"].float()
        grid = out["image_grid_thw"]
        tokens = int(grid.prod().item()) // 4
        input_ids = torch.tensor([before + [VISION_START] + [IMAGE_TOKEN] * tokens +
                                  [VISION_END] + after])
        inputs = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                      pixel_values=pixel_values, image_grid_thw=grid)
        if "mm_token_type_ids" in inspect.signature(ref.forward).parameters:
            # transformers 5's processors mark the image tokens (1) for get_rope_index
            inputs["mm_token_type_ids"] = (input_ids == IMAGE_TOKEN).int()
        with torch.no_grad():
            want = ref(**inputs).logits[0].float().numpy()
        prefix = os.path.join(args.out, f"qwen2vl_{backend}")
        prompt = ",".join(str(t) for t in before + [VISION_START, IMAGE_TOKEN, VISION_END] + after)
        run = run_tool([args.tool, model_dir, image_path, backend, prompt, prefix], rows,
                       backend=backend, processor=cls_name)
        if run is None:
            ok = False
            continue
        info = json.loads(run.stdout.strip().splitlines()[-1])
        ours_grid = info["grid"]
        pixels = np.fromfile(prefix + ".pixels.f32", dtype="<f4")
        ref_pixels = pixel_values.numpy().reshape(-1)
        same_grid = ours_grid == [int(x) for x in grid[0].tolist()]
        pixel_diff = float(np.abs(pixels - ref_pixels).max()) \
            if pixels.size == ref_pixels.size else float("inf")
        logits = np.fromfile(prefix + ".logits.f32", dtype="<f4")
        if logits.size != want.size:
            ok = False
            rows.append(dict(backend=backend, processor=cls_name, grid=ours_grid,
                             error=f"{logits.size} logits for transformers' {want.size}"))
            print(f"{cls_name}: {logits.size} logits for transformers' {want.size} MISMATCH")
            continue
        logits = logits.reshape(want.shape)
        rel_l2 = float(np.linalg.norm(logits - want) / np.linalg.norm(want))
        last_rel_l2 = float(np.linalg.norm(logits[-1] - want[-1]) / np.linalg.norm(want[-1]))
        max_diff = float(np.abs(logits - want).max())
        passed = same_grid and pixel_diff <= args.pixel_tol and rel_l2 <= args.logit_tol
        ok &= passed
        rows.append(dict(backend=backend, processor=cls_name, grid=ours_grid,
                         visual_tokens=info["visual_tokens"], prompt_len=info["prompt_len"],
                         pixel_max_abs_diff=pixel_diff, logits_rel_l2=rel_l2,
                         last_logits_rel_l2=last_rel_l2, logits_max_abs_diff=max_diff,
                         passed=passed))
        print(f"{cls_name:26s} ({backend:11s}) grid {ours_grid} {'=' if same_grid else '!='} "
              f"{grid[0].tolist()}; pixels max |diff| {pixel_diff:.3g}; logits over "
              f"{info['prompt_len']} positions rel L2 {rel_l2:.3g} (last {last_rel_l2:.3g}), "
              f"max |diff| {max_diff:.3g} {'ok' if passed else 'MISMATCH'}")
    summary = dict(transformers=transformers.__version__, torch=torch.__version__,
                   saved_vision_names=vision_names[:6], saved_names=len(saved),
                   pixel_tol=args.pixel_tol, logit_tol=args.logit_tol,
                   passed=ok and bool(rows), rows=rows)
    json.dump(summary, open(os.path.join(args.out, "qwen2vl.json"), "w"), indent=1)
    print("qwen2vl-tiny:", "matches transformers" if summary["passed"] else "MISMATCH")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
