#!/usr/bin/env python3
"""LLaVA's vision path against transformers (issue 17).

A tiny LlavaForConditionalGeneration ("llava-tiny": a CLIP ViT of 56 px images in 14 px patches,
D 64, 3 layers, feature layer -2, so 16 visual tokens; a 2-layer Llama text model of hidden 48)
with seeded random weights is saved by transformers (safetensors) with a CLIP
preprocessor_config.json, and reloaded in fp32. One PNG goes through both, for each image
processor backend transformers has (torchvision, PIL): the pixel values must agree within 1e-5,
and the projector's output (the image features that replace the image tokens' embeddings, taken
with a forward hook on multi_modal_projector) within 1e-4 relative (max |diff| / max |ref|).
The saved tensor names are recorded: the engine's loader reads transformers 5's layout and the
llava-hf one. Writes llava_vision.json; exit 1 on a mismatch.

Usage: tools/compare_llava_vision.py --tool build/.../vision_encode --out DIR
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import torch
import transformers
from PIL import Image

from compare_pixel_values import processors  # tools/: this script's folder
from hf_models import load_fp32, randomize, run_tool

IMAGE_TOKEN = 300
PREPROCESSOR = {
    "crop_size": {"height": 56, "width": 56}, "do_center_crop": True, "do_convert_rgb": True,
    "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 56},
}


def tiny_config():
    vision = transformers.CLIPVisionConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        image_size=56, patch_size=14, hidden_act="quick_gelu", layer_norm_eps=1e-5)
    text = transformers.LlamaConfig(
        hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=320, max_position_embeddings=256)
    config = transformers.LlavaConfig(
        vision_config=vision, text_config=text, vision_feature_layer=-2,
        vision_feature_select_strategy="default", projector_hidden_act="gelu")
    for name in ("image_token_index", "image_token_id"):  # transformers 4 / 5 spellings
        setattr(config, name, IMAGE_TOKEN)
    return config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    model_dir = os.path.join(args.out, "llava-tiny")
    os.makedirs(model_dir, exist_ok=True)
    model = transformers.LlavaForConditionalGeneration(tiny_config())
    randomize(model, args.seed)
    model.save_pretrained(model_dir, safe_serialization=True)
    json.dump(PREPROCESSOR, open(os.path.join(model_dir, "preprocessor_config.json"), "w"))
    from safetensors import safe_open
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        saved = sorted(f.keys())
    vision_names = [n for n in saved if "vision_tower" in n or "multi_modal_projector" in n]
    # Every saved name with its layer numbers as N: the layout transformers writes, for the record.
    name_patterns = sorted({re.sub(r"\.\d+\.", ".N.", n) for n in saved})
    print("saved vision tensors like:", vision_names[:2], "...", len(vision_names))
    ref = load_fp32(transformers.LlavaForConditionalGeneration, model_dir)
    captured = []
    projector = getattr(getattr(ref, "model", ref), "multi_modal_projector", None)
    if projector is None:
        projector = ref.multi_modal_projector
    projector.register_forward_hook(lambda mod, inp, out: captured.append(out.detach()))
    rng = np.random.default_rng(args.seed)
    image_path = os.path.join(args.out, "llava_tiny_input.png")
    base = np.linspace(0, 255, 90)[None, :, None] * 0.5 + rng.integers(0, 128, (70, 90, 3))
    Image.fromarray(base.astype(np.uint8), "RGB").save(image_path)
    image = Image.open(image_path).convert("RGB")
    tokens = ref.config.vision_config.image_size // ref.config.vision_config.patch_size
    input_ids = torch.tensor([[1] + [IMAGE_TOKEN] * tokens * tokens + [2]])
    rows, ok = [], True
    for backend, proc, cls_name in processors(PREPROCESSOR):
        pixel_values = proc(images=image, return_tensors="pt")["pixel_values"].float()
        captured.clear()
        with torch.no_grad():
            ref(input_ids=input_ids, pixel_values=pixel_values)
        want = captured[-1].reshape(-1, captured[-1].shape[-1]).numpy()
        prefix = os.path.join(args.out, f"ours_{backend}")
        run = run_tool([args.tool, model_dir, image_path, backend, prefix], rows,
                       backend=backend, processor=cls_name)
        if run is None:
            ok = False
            continue
        print(run.stdout.strip())
        pixels = np.fromfile(prefix + ".pixels.f32", dtype="<f4")
        features = np.fromfile(prefix + ".features.f32", dtype="<f4").reshape(want.shape)
        pixel_diff = float(np.abs(pixels - pixel_values[0].numpy().reshape(-1)).max())
        feature_diff = float(np.abs(features - want).max())
        scale = float(np.abs(want).max())
        rel_l2 = float(np.linalg.norm(features - want) / np.linalg.norm(want))
        passed = pixel_diff <= 1e-5 and feature_diff <= 1e-4 * max(scale, 1.0)
        ok &= passed
        rows.append(dict(backend=backend, processor=cls_name, visual_tokens=int(want.shape[0]),
                         pixel_max_abs_diff=pixel_diff, feature_max_abs_diff=feature_diff,
                         feature_max_abs=scale, feature_rel_l2=rel_l2, passed=passed))
        print(f"{cls_name:24s} ({backend:11s}) pixels max |diff| {pixel_diff:.3g}; features "
              f"max |diff| {feature_diff:.3g} of max {scale:.3g}, rel L2 {rel_l2:.3g} "
              f"{'ok' if passed else 'MISMATCH'}")
    summary = dict(transformers=transformers.__version__, torch=torch.__version__,
                   saved_vision_names=vision_names, saved_name_patterns=name_patterns, passed=ok and bool(rows), rows=rows)
    json.dump(summary, open(os.path.join(args.out, "llava_vision.json"), "w"), indent=1)
    print("llava-tiny vision path:", "matches transformers" if summary["passed"] else "MISMATCH")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
