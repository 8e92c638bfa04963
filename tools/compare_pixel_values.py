#!/usr/bin/env python3
"""The pixel values of inferbench's CLIP preprocessing against transformers' (issue 17).

Writes test images (random RGB PNGs at several sizes and aspect ratios, one whose crop margin is
odd, a grayscale+alpha PNG and a JPEG), runs `vision_preprocess IMAGE CONFIG BACKEND OUT` for
each transformers backend present, and compares with the image processor's pixel_values built
from the same preprocessor_config.json: transformers 5's CLIPImageProcessor (torchvision) and
CLIPImageProcessorPil (PIL); transformers 4's CLIPImageProcessorFast and CLIPImageProcessor.
Images are opened with PIL and converted to RGB, as LlavaProcessor's callers do. Pass: every
value within --tol (1e-5). Writes a JSON summary; exit 1 on a mismatch.

Usage: tools/compare_pixel_values.py --tool build/.../vision_preprocess --config CONFIG.json
       --out DIR [--tol 1e-5]
"""
import argparse
import inspect
import json
import os
import subprocess
import sys

import numpy as np
from PIL import Image


def test_images(out_dir):
    rng = np.random.default_rng(17)
    paths = []
    for w, h in [(500, 375), (375, 501), (1024, 683), (1003, 336), (200, 150), (336, 336)]:
        p = os.path.join(out_dir, f"rgb_{w}x{h}.png")
        # Noise plus a gradient: every filter tap matters, and nothing saturates everywhere.
        base = np.linspace(0, 255, w)[None, :, None] * 0.5 + rng.integers(0, 128, (h, w, 3))
        Image.fromarray(base.astype(np.uint8), "RGB").save(p)
        paths.append(p)
    p = os.path.join(out_dir, "gray_alpha_640x480.png")
    Image.fromarray(rng.integers(0, 256, (480, 640, 2), dtype=np.uint8), "LA").save(p)
    paths.append(p)
    p = os.path.join(out_dir, "photo_800x600.jpg")
    Image.fromarray(rng.integers(0, 256, (600, 800, 3), dtype=np.uint8), "RGB").save(p, quality=90)
    paths.append(p)
    return paths


def processors(config, family="CLIP"):
    """(backend name for vision_preprocess, processor, transformers class name) for each of
    family's image processor classes (CLIPImageProcessor, ...Fast, ...Pil) this transformers
    has."""
    import transformers

    found = []
    for cls_name in [f"{family}ImageProcessor", f"{family}ImageProcessorFast",
                     f"{family}ImageProcessorPil"]:
        cls = getattr(transformers, cls_name, None)
        if cls is None:
            continue
        try:
            proc = cls(**{k: v for k, v in config.items() if k not in ("image_processor_type", "processor_class")})
        except Exception as e:  # an unavailable backend (no torchvision)
            print(f"{cls_name}: not usable here ({e})")
            continue
        backend = getattr(proc, "backend", None)
        if backend is None:  # transformers 4: the Fast class is torchvision's, the other PIL's
            backend = "torchvision" if cls_name.endswith("Fast") else "pil"
        backend = "torchvision" if "torch" in str(backend) else "pil"
        found.append((backend, proc, cls_name))
    return found


def best_shift(got, want):
    """On a mismatch: the (dy, dx) of at most one pixel that brings ours closest to theirs over
    the overlap, and the max |diff| there (a crop offset rounded the other way shows as a shift
    with a diff of 0)."""
    best = None
    h, w = want.shape[1:]
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            a = got[:, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)]
            b = want[:, max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
            d = float(np.abs(a - b).max())
            if best is None or d < best[2]:
                best = (dy, dx, d)
    return dict(dy=best[0], dx=best[1], max_abs_diff=best[2])


def crop_sources(procs):
    """The center_crop each processor runs, for the record (which rounding it uses)."""
    out = {}
    for backend, proc, cls_name in procs:
        try:
            out[cls_name] = inspect.getsource(type(proc).center_crop)[:2000]
        except Exception as e:  # noqa: BLE001 (a record, not a check)
            out[cls_name] = f"unavailable: {e}"
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    import transformers

    os.makedirs(args.out, exist_ok=True)
    img_dir = os.path.join(args.out, "images")
    os.makedirs(img_dir, exist_ok=True)
    config = json.load(open(args.config))
    rows, ok = [], True
    procs = processors(config)
    if not procs:
        print("no CLIP image processor found in transformers")
        return 1
    for path in test_images(img_dir):
        image = Image.open(path).convert("RGB")
        for backend, proc, cls_name in procs:
            want = proc(images=image, return_tensors="np")["pixel_values"][0].astype(np.float32)
            raw = os.path.join(args.out, "ours.f32")
            subprocess.run([args.tool, path, args.config, backend, raw], check=True,
                           stdout=subprocess.DEVNULL)
            got = np.fromfile(raw, dtype="<f4")
            shift = None
            if got.size != want.size:
                diff = float("inf")
            else:
                got = got.reshape(want.shape)
                diff = float(np.abs(got - want).max())
                if diff > args.tol:
                    shift = best_shift(got, want)
            passed = diff <= args.tol
            ok &= passed
            rows.append(dict(image=os.path.basename(path), backend=backend, processor=cls_name,
                             shape=list(want.shape), max_abs_diff=diff, passed=passed,
                             best_shift=shift))
            print(f"{os.path.basename(path):24s} {cls_name:24s} ({backend:11s}) "
                  f"max |diff| {diff:.3g} {'ok' if passed else 'MISMATCH'}")
    summary = dict(transformers=transformers.__version__, tol=args.tol, passed=ok, rows=rows,
                   center_crop_sources=crop_sources(procs))
    try:
        import torch, torchvision  # noqa: E401
        summary.update(torch=torch.__version__, torchvision=torchvision.__version__)
    except ImportError:
        pass
    import PIL
    summary["pillow"] = PIL.__version__
    json.dump(summary, open(os.path.join(args.out, "pixel_values.json"), "w"), indent=1)
    print("pixel values:", "all within" if ok else "NOT all within", args.tol)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
