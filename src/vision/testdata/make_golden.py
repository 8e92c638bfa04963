#!/usr/bin/python3
"""Writes the PIL goldens of clip_preprocess_test (Debian's python3-pil 9.4 and python3-numpy,
hence /usr/bin/python3; run here, commit the outputs): a random 37x23 RGB PNG, Pillow's bicubic resizes of it, and the pixel values of
transformers' PIL backend (CLIPImageProcessorPil) for small_preprocessor_config.json, computed
with its steps written out: PIL resize (bicubic), crop at (orig - crop) // 2, float64 rescale
cast to float32, float32 (x - mean) / std, channels first."""
import json
import os

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(17)
pixels = rng.integers(0, 256, size=(23, 37, 3), dtype=np.uint8)
image = Image.fromarray(pixels, "RGB")
image.save(os.path.join(HERE, "resize_input.png"))
for w, h in [(16, 11), (50, 31), (37, 9)]:
    image.resize((w, h), resample=Image.BICUBIC).save(os.path.join(HERE, f"pil_resize_{w}x{h}.png"))

cfg = json.load(open(os.path.join(HERE, "small_preprocessor_config.json")))
edge = cfg["size"]["shortest_edge"]
width, height = image.size
short, long = min(width, height), max(width, height)
new_long = int(edge * long / short)
new_w, new_h = (edge, new_long) if width <= height else (new_long, edge)
resized = np.array(image.resize((new_w, new_h), resample=cfg["resample"]))
ch, cw = cfg["crop_size"]["height"], cfg["crop_size"]["width"]
top, left = (new_h - ch) // 2, (new_w - cw) // 2
crop = resized[top:top + ch, left:left + cw]
x = (crop.astype(np.float64) * cfg["rescale_factor"]).astype(np.float32)
x = (x - np.array(cfg["image_mean"], dtype=np.float32)) / np.array(cfg["image_std"], dtype=np.float32)
x.transpose(2, 0, 1).astype("<f4").tofile(os.path.join(HERE, "clip_pil_expected.f32"))
print("wrote goldens; crop", ch, cw, "from", new_w, "x", new_h)
