#!/usr/bin/env python3
"""A random tiny LLaVA checkpoint (LlavaForConditionalGeneration as transformers 5 saves it), with
nothing but the standard library, for trying `serve` and `run` with images on a CPU.

Writes DIR/config.json, DIR/preprocessor_config.json and DIR/model.safetensors (fp32): a CLIP
vision tower of 28 px images in 7 px patches (16 visual tokens per image), hidden 32, 3 layers,
the 2-layer gelu projector, and a Llama of hidden 64, 2 layers, 4 heads (2 KV heads) whose
vocabulary (300) covers the byte tokenizer presets use (ids 3..258); the image token is 298.
Weights are uniform, seeded (--seed): the model computes, it does not understand images.

  tools/make_tiny_llava.py --out models/llava-tiny
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_lora import write_safetensors  # noqa: E402

VOCAB, IMAGE_TOKEN = 300, 298
D_TEXT, F_TEXT, LAYERS_TEXT, HEADS, KV_HEADS = 64, 128, 2, 4, 2
D_VIS, F_VIS, LAYERS_VIS, HEADS_VIS, IMAGE_PX, PATCH_PX = 32, 48, 3, 4, 28, 7


def config():
    return {
        "architectures": ["LlavaForConditionalGeneration"], "image_token_index": IMAGE_TOKEN,
        "projector_hidden_act": "gelu", "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "text_config": {"model_type": "llama", "hidden_size": D_TEXT,
                        "intermediate_size": F_TEXT, "num_hidden_layers": LAYERS_TEXT,
                        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
                        "vocab_size": VOCAB, "max_position_embeddings": 512,
                        "rms_norm_eps": 1e-5, "eos_token_id": VOCAB - 1},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": D_VIS,
                          "intermediate_size": F_VIS, "num_hidden_layers": LAYERS_VIS,
                          "num_attention_heads": HEADS_VIS, "image_size": IMAGE_PX,
                          "patch_size": PATCH_PX},
    }


def shapes():
    """(name, shape) of every tensor, transformers 5's names."""
    out = []
    tower = "model.vision_tower.vision_model."
    patches = (IMAGE_PX // PATCH_PX) ** 2
    out += [(tower + "embeddings.patch_embedding.weight", (D_VIS, 3, PATCH_PX, PATCH_PX)),
            (tower + "embeddings.class_embedding", (D_VIS,)),
            (tower + "embeddings.position_embedding.weight", (patches + 1, D_VIS)),
            (tower + "pre_layrnorm.weight", (D_VIS,)), (tower + "pre_layrnorm.bias", (D_VIS,)),
            (tower + "post_layernorm.weight", (D_VIS,)), (tower + "post_layernorm.bias", (D_VIS,))]
    for i in range(LAYERS_VIS):
        layer = f"{tower}encoder.layers.{i}."
        for n in ("layer_norm1", "layer_norm2"):
            out += [(layer + n + ".weight", (D_VIS,)), (layer + n + ".bias", (D_VIS,))]
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out += [(layer + "self_attn." + n + ".weight", (D_VIS, D_VIS)),
                    (layer + "self_attn." + n + ".bias", (D_VIS,))]
        out += [(layer + "mlp.fc1.weight", (F_VIS, D_VIS)), (layer + "mlp.fc1.bias", (F_VIS,)),
                (layer + "mlp.fc2.weight", (D_VIS, F_VIS)), (layer + "mlp.fc2.bias", (D_VIS,))]
    proj = "model.multi_modal_projector."
    out += [(proj + "linear_1.weight", (D_TEXT, D_VIS)), (proj + "linear_1.bias", (D_TEXT,)),
            (proj + "linear_2.weight", (D_TEXT, D_TEXT)), (proj + "linear_2.bias", (D_TEXT,))]
    lm = "model.language_model."
    kv = KV_HEADS * D_TEXT // HEADS
    out += [(lm + "embed_tokens.weight", (VOCAB, D_TEXT)), (lm + "norm.weight", (D_TEXT,)),
            ("lm_head.weight", (VOCAB, D_TEXT))]
    for i in range(LAYERS_TEXT):
        layer = f"{lm}layers.{i}."
        out += [(layer + "input_layernorm.weight", (D_TEXT,)),
                (layer + "post_attention_layernorm.weight", (D_TEXT,)),
                (layer + "self_attn.q_proj.weight", (D_TEXT, D_TEXT)),
                (layer + "self_attn.k_proj.weight", (kv, D_TEXT)),
                (layer + "self_attn.v_proj.weight", (kv, D_TEXT)),
                (layer + "self_attn.o_proj.weight", (D_TEXT, D_TEXT)),
                (layer + "mlp.gate_proj.weight", (F_TEXT, D_TEXT)),
                (layer + "mlp.up_proj.weight", (F_TEXT, D_TEXT)),
                (layer + "mlp.down_proj.weight", (D_TEXT, F_TEXT))]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the checkpoint directory to write")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tensors = []
    for name, shape in shapes():
        n = 1
        for dim in shape:
            n *= dim
        norm_gain = ("norm" in name or "layrnorm" in name) and name.endswith(".weight")
        tensors.append((name, shape, [1.0 + 0.2 * rng.uniform(-1, 1) if norm_gain
                                      else 0.3 * rng.uniform(-1, 1) for _ in range(n)]))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config(), f, indent=1)
    with open(os.path.join(args.out, "preprocessor_config.json"), "w") as f:
        json.dump({"size": {"shortest_edge": IMAGE_PX},
                   "crop_size": {"height": IMAGE_PX, "width": IMAGE_PX}}, f)
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    print(f"wrote a tiny LLaVA to {args.out}")


if __name__ == "__main__":
    main()
