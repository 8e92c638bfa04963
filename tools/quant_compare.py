#!/usr/bin/env python3
"""inferbench on published-format FP8 and INT8 checkpoints against a torch reference from the format.

A Llama-3-8B-shaped model (hidden 4,096, 32 heads, 8 KV heads, FFN 14,336, vocabulary 128,256,
rope theta 500,000; 2 layers by default) gets seeded random weights (tools/hf_models.py) and is
saved in bf16 to OUT/dense; the live model is dropped. From those files two FP8 checkpoints are
written, every layer's *_proj.weight (q, k, v, o, gate, up, down) as F8_E4M3 beside its
<name>.weight_scale (float32), embeddings, norms and lm_head left in bf16:
  - OUT/fp8-tensor: vLLM's "fp8" serialization (quant_method "fp8", activation_scheme "dynamic"),
    one scale per tensor, a 0-dim tensor: scale = max|W| / 448;
  - OUT/fp8-channel: compressed-tensors "float-quantized" (weights strategy "channel", input
    activations dynamic per token), one scale per output row, shape [N, 1]: scale = max_k|W| / 448;
with codes = e4m3(clamp(W * 448 / amax, -448, 448)) in both.

The reference is the HF model loaded from OUT/dense in fp32 (eager attention, TF32 off), each
quantized Linear's weight replaced by codes.float() * scale read back from the FP8 file, and a
forward pre-hook quantizing its input per token as src/backend/weight.h defines W8A8:
s = max|x| / 448 (1 for a zero row), xq = e4m3(clamp(x * 448 / max|x|, -448, 448)) (0 for a zero
row), input replaced by xq * s. `inferbench generate --quantization fp8 --dump-logits` runs each
FP8 directory greedily; the reference's logits are computed teacher-forced on inferbench's tokens
and every generated step is compared: relative L2, KL(reference || inferbench) and top-1.

INT8 (compressed-tensors, as llm-compressor writes it): OUT/int8-w8a8-channel ("int-quantized",
per-row scale [N, 1], input activations dynamic int8 per token; run with --quantization
int8-w8a8) and OUT/int8-w8a16-tensor ("naive-quantized", one scale per tensor, weights only;
--quantization int8): codes = clamp(rne(W * 127 / amax), -127, 127) as I8, scale = amax / 127.
The reference's hooks quantize inputs per token to int8 (round half to even, scale max|x| / 127)
for W8A8 and leave them alone for W8A16, whose CPU fp32 run should then agree to fp32 noise.

The definition's own noise floor. Two correct fp32 implementations of this W8A8 differ only where
an fp32 sum that differs in its last bit (accumulation order) moves an activation across an E4M3
rounding boundary of the per-token quantization; but each such flip moves that activation by up
to 1/16 of its value, which flips further roundings downstream, and the flips cascade. Measured on
the H200 with this model (1 layer, 27 tokens): the torch reference on CUDA against the same
reference on the CPU had 5 flipped inputs of 110,592 at q/k/v, 1,483 at o, 4,122 at gate/up and
86,610 of 387,072 at down, and logits 1.8e-2 apart (relative L2); inferbench's CPU backend was
2.0e-2 from it, 3.9e-2 with 2 layers, where FP8 is 4e-2 and 6e-2 from dense. A fixed 1e-2 bound
is below that floor, so the script measures the floor for each checkpoint and prompt (the same
reference run on the CPU, fp32, against the CUDA one, on inferbench's CPU tokens) and bounds
inferbench's CPU fp32 distance by it. The consequence: this end-to-end check catches gross
loading errors (a wrong or misplaced scale, swapped rows, misread codes), not a missing activation
quantization (the reference with and without its activation hooks differs by 3e-2 to 4e-2 here,
inside the floor); the C++ op tests check the kernels against backend/weight.h exactly.
Checks (exit 1 when one fails, naming it):
  - CPU fp32: max rel L2 <= max(1e-2, 2 x the floor).
  - CUDA bf16: max rel L2 <= 0.15. bf16 activations flip many E4M3 roundings (the repo's
    engine_cuda quant test measured 0.07-0.08 where FP8 and dense differ by 0.09; here, the same
    codes quantized at load from OUT/dense ran 4.1e-2 to 4.7e-2 from the reference).
  - Run without --quantization fp8, each FP8 checkpoint is refused: exit 2, "run it with
    --quantization fp8" (the checkpoint contradicts the flag).
For context every row also gives the FP8 reference against the dense reference (the same fp32
model with the bf16 file's weights, no quantization) on the same tokens: how far FP8 is from dense.
Prints a Markdown table and writes OUT/quant_compare.json (rewritten after every row).

Usage (GPU machine): tools/quant_compare.py --inferbench build/bin/inferbench --out DIR
  [--keep] (keep DIR/dense, DIR/fp8-tensor, DIR/fp8-channel)  [--layers N]
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from hf_models import ieee_fp32, make_config, random_model

E4M3_MAX = 448.0
INT8_MAX = 127.0
LLAMA3_8B = dict(  # meta-llama/Meta-Llama-3-8B (as tools/hf_compare.py's "llama-3")
    vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
    num_key_value_heads=8, rope_theta=500000.0, rms_norm_eps=1e-5,
    max_position_embeddings=8192, bos_token_id=128000, eos_token_id=128001,
    tie_word_embeddings=False)
def compressed_tensors(packing, weight_type, weight_strategy, activations=None):
    """A compressed-tensors quantization_config with one group of 8-bit symmetric weights and,
    where given, 8-bit input activations (dict(strategy=..., dynamic=...))."""
    group = {"targets": ["Linear"],
             "weights": {"num_bits": 8, "type": weight_type, "strategy": weight_strategy,
                         "symmetric": True, "dynamic": False}}
    if activations is not None:
        group["input_activations"] = dict(num_bits=8, type=weight_type, symmetric=True,
                                          **activations)
    return {"quant_method": "compressed-tensors", "format": packing,
            "quantization_status": "compressed", "config_groups": {"group_0": group},
            "ignore": ["lm_head"]}


PER_TOKEN = dict(strategy="token", dynamic=True)
STATIC_TENSOR = dict(strategy="tensor", dynamic=False)
FORMATS = {
    # directory name: (per-channel scales, config.json quantization_config, --quantization)
    "fp8-tensor": (False, {"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
    "fp8-channel": (True, compressed_tensors("float-quantized", "float", "channel", PER_TOKEN),
                    "fp8"),
    # compressed-tensors INT8 as llm-compressor's W8A8 scheme writes it (I8 weights).
    "int8-w8a8-channel": (True, compressed_tensors("int-quantized", "int", "channel", PER_TOKEN),
                          "int8-w8a8"),
    # Weight-only INT8 (W8A16) stored unpacked (naive-quantized).
    "int8-w8a16-tensor": (False, compressed_tensors("naive-quantized", "int", "tensor"), "int8"),
    # Static per-tensor input scales (X.input_scale): vLLM's fp8 "static" scheme, and
    # llm-compressor's static W8A8 int8 (symmetric, strategy "tensor").
    "fp8-tensor-static": (False, {"quant_method": "fp8", "activation_scheme": "static"}, "fp8"),
    "int8-w8a8-static": (True, compressed_tensors("int-quantized", "int", "channel",
                                                  STATIC_TENSOR), "int8-w8a8"),
}
# The input_scale written for a static checkpoint: |x| up to 8 maps to the code range, times a
# factor per projection so that q/k/v and gate/up differ (the engine and the reference take the
# largest of a fused weight's, as vLLM does).
STATIC_RANGE = 8.0
STATIC_FACTOR = {"q_proj": 1.0, "k_proj": 1.5, "v_proj": 0.75, "o_proj": 1.0,
                 "gate_proj": 1.25, "up_proj": 0.8, "down_proj": 2.0}
FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
# Max rel L2 against the reference: half-precision runs a fixed bound, fp32 runs
# max(TOLERANCE["fp32"], FLOOR_FACTOR x the reference's own CUDA-vs-CPU distance).
TOLERANCE = {"fp32": 1e-2, "bf16": 0.15, "fp16": 0.15}
FLOOR_FACTOR = 2.0
REFUSAL_TEXT = "run it with --quantization "  # + the format's value


def is_quantized(name):
    """The layers' matmul weights: q, k, v, o, gate, up and down projections."""
    return ".layers." in name and name.endswith("_proj.weight")


def save_dense(directory, layers, seed):
    """Seeded random weights saved in bf16; the live model is dropped, never reused."""
    config = make_config("LlamaConfig", dict(LLAMA3_8B, num_hidden_layers=layers))
    model = random_model(config, seed, device="cuda")
    model.to(torch.bfloat16).save_pretrained(directory)  # safetensors
    del model
    torch.cuda.empty_cache()


def read_tensors(directory):
    """Every tensor of the directory's safetensors files (one file or shards), on the CPU."""
    tensors = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        tensors.update(load_file(path))
    return tensors


def quantize_weight(w, per_channel, quantization):
    """E4M3 or int8 codes and the float32 scale of w as the formats define them (0-dim or [N, 1]
    scale): scale = amax / 448 (E4M3) or amax / 127 (int8, symmetric, round half to even)."""
    w = w.to("cuda", torch.float32)
    amax = w.abs().amax(dim=1, keepdim=True) if per_channel else w.abs().amax()
    top = E4M3_MAX if quantization == "fp8" else INT8_MAX
    scale = torch.where(amax > 0, amax / top, torch.ones_like(amax))
    inv = torch.where(amax > 0, top / amax, torch.zeros_like(amax))
    if quantization == "fp8":
        codes = (w * inv).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    else:
        codes = torch.round(w * inv).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return codes.cpu().contiguous(), scale.to(torch.float32).cpu().contiguous()


def write_quantized(dense_tensors, dense_dir, out_dir, per_channel, quantization_config,
                    quantization):
    """dense_dir's config.json (+ quantization_config) and other small files, and one
    model.safetensors with every layer matmul weight as F8_E4M3 or I8 plus its weight_scale."""
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    for name in os.listdir(dense_dir):  # config.json, generation_config.json, tokenizer files
        src = os.path.join(dense_dir, name)
        if os.path.isfile(src) and not name.endswith((".safetensors", ".safetensors.index.json")):
            shutil.copy2(src, out_dir)
    with open(os.path.join(dense_dir, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = quantization_config
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    static = is_static(quantization_config)
    tensors = {}
    for name, t in dense_tensors.items():
        if is_quantized(name):
            codes, scale = quantize_weight(t, per_channel, quantization)
            tensors[name] = codes
            tensors[name + "_scale"] = scale
            if static:
                top = E4M3_MAX if quantization == "fp8" else INT8_MAX
                proj = name[:-len(".weight")].rsplit(".", 1)[1]
                tensors[name[:-len(".weight")] + ".input_scale"] = torch.tensor(
                    STATIC_RANGE * STATIC_FACTOR[proj] / top, dtype=torch.float32)
        else:
            tensors[name] = t
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})


def is_static(quantization_config):
    if quantization_config.get("activation_scheme") == "static":
        return True
    groups = quantization_config.get("config_groups", {}).values()
    return any(not g.get("input_activations", {}).get("dynamic", True) for g in groups)


def input_scales(ckpt_dir):
    """{module name: the static input scale it runs with}: the file's X.input_scale, the largest
    of a fused weight's sources (q/k/v, gate/up) for each of them; {} without input_scale."""
    raw = {}
    for path in sorted(glob.glob(os.path.join(ckpt_dir, "*.safetensors"))):
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in f.keys():
                if name.endswith(".input_scale"):
                    raw[name[:-len(".input_scale")]] = float(f.get_tensor(name))
    out = {}
    for module, scale in raw.items():
        prefix, proj = module.rsplit(".", 1)
        group = next((g for g in FUSED if proj in g), (proj,))
        out[module] = max(raw[prefix + "." + p] for p in group)
    return out


def dequantized_weights(ckpt_dir):
    """{module name: codes.float() * weight_scale} of the quantized files, on CUDA."""
    out = {}
    for path in sorted(glob.glob(os.path.join(ckpt_dir, "*.safetensors"))):
        with safe_open(path, framework="pt", device="cuda") as f:
            names = set(f.keys())
            for name in names:
                if not is_quantized(name):
                    continue
                codes, scale = f.get_tensor(name), f.get_tensor(name + "_scale")
                if codes.dtype not in (torch.float8_e4m3fn, torch.int8):
                    raise RuntimeError(f"{path}: {name} is {codes.dtype}, not float8_e4m3fn "
                                       "or int8")
                out[name[:-len(".weight")]] = codes.float() * scale.float()
    return out


def quantize_activations(x, quantization, static_scale=None):
    """W8A8's per-token dynamic quantization of x (src/backend/weight.h), dequantized: E4M3
    (fp8) or symmetric int8 rounded half to even (int8-w8a8); with static_scale, every token
    with that scale: x * (1 / s) in fp32, saturating."""
    top = E4M3_MAX if quantization == "fp8" else INT8_MAX
    if static_scale is not None:
        s = torch.tensor(static_scale, dtype=torch.float32, device=x.device)
        inv = torch.tensor(1.0, dtype=torch.float32, device=x.device) / s
    else:
        amax = x.abs().amax(dim=-1, keepdim=True)
        s = torch.where(amax > 0, amax / top, torch.ones_like(amax))
        inv = torch.where(amax > 0, top / amax, torch.zeros_like(amax))
    if quantization == "fp8":
        xq = (x * inv).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()
    else:
        xq = torch.round(x * inv).clamp(-INT8_MAX, INT8_MAX)
    return xq * s


class Reference:
    """The dense files reloaded in fp32; set_weights switches its matmuls between dense and the
    dequantized weights, with per-token activation quantization for the W8A8 formats."""

    def __init__(self, dense_dir, device):
        self.device = device
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            dense_dir, dtype=torch.float32, attn_implementation="eager").to(device).eval()
        self.linears = {n: m for n, m in self.model.named_modules()
                        if isinstance(m, torch.nn.Linear) and is_quantized(n + ".weight")}
        self.dense = {n: m.weight.detach().clone() for n, m in self.linears.items()}
        self.quantize_inputs = None  # None, "fp8" or "int8-w8a8"
        self.static_scales = {}  # module name: static input scale (static checkpoints)
        self.names = {m: n for n, m in self.linears.items()}
        for m in self.linears.values():
            m.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        if not self.quantize_inputs:
            return None
        static = self.static_scales.get(self.names[module])
        return (quantize_activations(args[0], self.quantize_inputs, static),) + tuple(args[1:])

    @torch.no_grad()
    def set_weights(self, weights, quantization=None, static_scales=None):
        """weights: dequantized_weights(...) of a checkpoint for --quantization `quantization`,
        or None (dense, no quantization); static_scales: input_scales(...) of a static one."""
        self.static_scales = static_scales or {}
        if weights is not None and set(weights) != set(self.linears):
            raise RuntimeError(f"the FP8 file's matmul weights {sorted(weights)[:3]}... do not "
                               f"match the model's {sorted(self.linears)[:3]}...")
        for n, m in self.linears.items():
            m.weight.copy_(self.dense[n] if weights is None else weights[n].to(self.device))
        w8a8 = weights is not None and quantization in ("fp8", "int8-w8a8")
        self.quantize_inputs = quantization if w8a8 else None

    @torch.no_grad()
    def step_logits(self, prompt, tokens):
        """The logits at each generated step, teacher-forced on inferbench's tokens."""
        ids = torch.tensor([prompt + tokens[:-1]], device=self.device)
        logits = self.model(ids, logits_to_keep=len(tokens)).logits[0]
        return logits.float().cpu().numpy()  # (steps, vocab)


def run_inferbench(binary, directory, device, dtype, prompt, steps, out_npy, quantization):
    cmd = [binary, "generate", "--model", directory, "--device", device, "--dtype", dtype,
           "--load-format", "safetensors", "--prompt-token-ids", ",".join(map(str, prompt)),
           "--max-tokens", str(steps), "--dump-logits", out_npy]
    if quantization:
        cmd += ["--quantization", quantization]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc, time.time() - t0


def log_softmax(a):
    a = np.asarray(a, dtype=np.float64)
    z = a - a.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def compare(ref, cand):
    """Per step: relative L2 of cand against ref, KL(softmax(ref) || softmax(cand)), top-1."""
    if ref.shape != cand.shape:
        raise RuntimeError(f"logits of shape {cand.shape}, reference {ref.shape}")
    rel = np.linalg.norm(cand - ref, axis=1) / np.linalg.norm(ref, axis=1)
    lp, lq = log_softmax(ref), log_softmax(cand)
    kl = (np.exp(lp) * (lp - lq)).sum(axis=1)
    top1 = (ref.argmax(axis=1) == cand.argmax(axis=1)).mean()
    return dict(max_rel_l2=float(rel.max()), mean_rel_l2=float(rel.mean()),
                mean_kl=float(kl.mean()), max_kl=float(kl.max()), top1=float(top1))


def save_json(args, rows, refusals, failures):
    """Rewritten after every row, so a run stopped early keeps what it measured."""
    path = os.path.join(args.out, "quant_compare.json")
    with open(path + ".tmp", "w") as f:
        json.dump(dict(transformers=transformers.__version__, torch=torch.__version__,
                       model="Llama-3-8B shapes, seeded random weights", layers=args.layers,
                       steps=args.steps, seed=args.seed, tolerance=TOLERANCE,
                       fp32_tolerance=f"max({TOLERANCE['fp32']}, {FLOOR_FACTOR} x "
                                      "floor_ref_cuda_vs_cpu.max_rel_l2)",
                       formats={k: dict(quantization_config=v[1], quantization=v[2])
                                for k, v in FORMATS.items()},
                       reference="from_pretrained(dense bf16 files, dtype=float32), eager, TF32 "
                                 "off; weights = codes * weight_scale from the quantized file, "
                                 "inputs quantized per token to E4M3 (fp8) or int8 "
                                 "(int8-w8a8), dynamically, or with the file's input_scale "
                                 "(the largest of a fused weight's sources) in the *-static "
                                 "checkpoints; int8 (W8A16): inputs unquantized",
                       kl="KL(reference || candidate), nats, mean over generated steps",
                       rows=rows, refusals=refusals, failures=failures), f, indent=2)
    os.replace(path + ".tmp", path)


def check_refusal(binary, ckpt, prompt, tmp, quantization):
    """The quantized checkpoint without its --quantization: exit 2 naming the flag."""
    proc, _ = run_inferbench(binary, ckpt, "cpu", "fp32", prompt, 1,
                             os.path.join(tmp, "refused.npy"), None)
    text = (proc.stderr + proc.stdout).strip()
    passed = proc.returncode == 2 and REFUSAL_TEXT + quantization in text
    return dict(checkpoint=os.path.basename(ckpt), exit_code=proc.returncode,
                message=text[-400:], passed=passed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inferbench", default="build/bin/inferbench")
    ap.add_argument("--out", default="quant-compare", help="directory: checkpoints and JSON")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lengths", default="24,256", help="prompt lengths in tokens")
    ap.add_argument("--runs", default="cpu:fp32,cuda:bf16",
                    help="backend:dtype pairs inferbench runs with each --quantization")
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help="checkpoints to write and compare: " + ", ".join(FORMATS))
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints under --out")
    args = ap.parse_args()
    ieee_fp32()
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    lengths = [int(x) for x in args.lengths.split(",")]
    runs = [tuple(r.split(":")) for r in args.runs.split(",")]
    dense_dir = os.path.join(args.out, "dense")
    formats = {n: FORMATS[n] for n in args.formats.split(",")}
    ckpt_dirs = {name: os.path.join(args.out, name) for name in formats}
    rows, refusals, failures = [], [], []
    try:
        shutil.rmtree(dense_dir, ignore_errors=True)
        save_dense(dense_dir, args.layers, args.seed)
        dense_tensors = read_tensors(dense_dir)
        for name, (per_channel, qconfig, quantization) in formats.items():
            write_quantized(dense_tensors, dense_dir, ckpt_dirs[name], per_channel, qconfig,
                            quantization)
        del dense_tensors
        torch.cuda.empty_cache()
        print(f"checkpoints written under {args.out} ({time.time() - t_start:.0f} s)", flush=True)

        ref = Reference(dense_dir, "cuda")
        ref_cpu = Reference(dense_dir, "cpu")  # the same definition on the CPU: the noise floor
        rng = np.random.default_rng(args.seed)
        vocab = ref.model.config.vocab_size
        prompts = {n: [int(x) for x in rng.integers(0, vocab, size=n)] for n in lengths}
        with tempfile.TemporaryDirectory(prefix="quantcmp-") as tmp:
            for name, ckpt in ckpt_dirs.items():
                quant = formats[name][2]
                r = check_refusal(args.inferbench, ckpt, prompts[lengths[0]], tmp, quant)
                refusals.append(r)
                if not r["passed"]:
                    failures.append(f"{name} without --quantization {quant}: exit "
                                    f"{r['exit_code']} (expected 2 with '{REFUSAL_TEXT}{quant}'): "
                                    f"{r['message'][-200:]}")
                print(f"{name} without --quantization {quant}: exit {r['exit_code']}", flush=True)
                weights = dequantized_weights(ckpt)
                statics = input_scales(ckpt)
                ref_cpu.set_weights(weights, quant, statics)
                for length in lengths:
                    prompt = prompts[length]
                    floor = None  # the reference on CUDA against itself on the CPU
                    for device, dtype in runs:
                        row = dict(checkpoint=name, backend=device, dtype=dtype,
                                   prompt_len=length)
                        try:
                            proc, secs = run_inferbench(
                                args.inferbench, ckpt, device, dtype, prompt, args.steps,
                                os.path.join(tmp, "logits.npy"), quant)
                            if proc.returncode != 0:
                                raise RuntimeError(f"inferbench exit {proc.returncode}: "
                                                   f"{proc.stderr.strip()[-600:]}")
                            tokens = json.loads(proc.stdout.strip().splitlines()[-1])["token_ids"]
                            logits = np.load(os.path.join(tmp, "logits.npy"))
                            ref.set_weights(weights, quant, statics)
                            fp8_ref = ref.step_logits(prompt, tokens)
                            ref.set_weights(None)
                            dense_ref = ref.step_logits(prompt, tokens)
                            row.update(steps=len(tokens), seconds=round(secs, 2),
                                       **compare(fp8_ref, logits))
                            row["fp8_ref_vs_dense"] = compare(dense_ref, fp8_ref)
                            if floor is None:
                                floor = compare(fp8_ref, ref_cpu.step_logits(prompt, tokens))
                            row["floor_ref_cuda_vs_cpu"] = floor
                            row["tolerance"] = TOLERANCE[dtype]
                            if dtype == "fp32":
                                row["tolerance"] = max(TOLERANCE["fp32"],
                                                       FLOOR_FACTOR * floor["max_rel_l2"])
                            row["passed"] = row["max_rel_l2"] <= row["tolerance"]
                            if not row["passed"]:
                                failures.append(
                                    f"{name} {device} {dtype} prompt {length}: max rel L2 "
                                    f"{row['max_rel_l2']:.3e} > {row['tolerance']:.3g}")
                            print(f"{name} {device} {dtype} {length}: max rel L2 "
                                  f"{row['max_rel_l2']:.2e}, mean KL {row['mean_kl']:.2e}, "
                                  f"top-1 {row['top1']:.2f} ({secs:.1f} s)", flush=True)
                        except Exception as e:  # report and go on with the next row
                            row.update(error=str(e)[-800:], passed=False)
                            failures.append(f"{name} {device} {dtype} prompt {length}: ERROR "
                                            f"{str(e)[-300:]}")
                            print(f"{name} {device} {dtype} {length}: ERROR {str(e)[-300:]}",
                                  flush=True)
                        rows.append(row)
                        save_json(args, rows, refusals, failures)
                del weights
                torch.cuda.empty_cache()
    except Exception as e:  # setup failed (model, checkpoints, reference): report it
        traceback.print_exc()
        failures.append(f"ERROR {type(e).__name__}: {str(e)[-600:]}")
    finally:
        if not args.keep:
            for d in [dense_dir, *ckpt_dirs.values()]:
                shutil.rmtree(d, ignore_errors=True)
    save_json(args, rows, refusals, failures)

    print(f"\nquant_compare (transformers {transformers.__version__}, torch {torch.__version__}; "
          f"Llama-3-8B shapes, {args.layers} layers, {args.steps} greedy steps; reference: fp32 "
          f"W8A8 / W8A16 from the checkpoint's codes and scales, TF32 off; KL(reference || "
          f"candidate); floor: the reference on CUDA against itself on the CPU (max rel L2); "
          f"last three columns: the quantized reference against the dense reference on the same "
          f"tokens; "
          f"{time.time() - t_start:.0f} s)")
    print("| checkpoint | backend/dtype | prompt | max rel L2 | mean KL | top-1 | floor "
          "| tolerance | result | quantized vs dense: max rel L2 | mean KL | top-1 |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for r in rows:
        head = f"| {r['checkpoint']} | {r['backend']}/{r['dtype']} | {r['prompt_len']} "
        if "error" in r:
            print(head + f"| - | - | - | - | - | ERROR: {r['error'][:200]} | - | - | - |")
            continue
        d = r["fp8_ref_vs_dense"]
        print(head + f"| {r['max_rel_l2']:.2e} | {r['mean_kl']:.2e} | {r['top1']:.2f} "
              f"| {r['floor_ref_cuda_vs_cpu']['max_rel_l2']:.2e} "
              f"| {r['tolerance']:.3g} | {'pass' if r['passed'] else 'FAIL'} "
              f"| {d['max_rel_l2']:.2e} | {d['mean_kl']:.2e} | {d['top1']:.2f} |")
    for r in refusals:
        print(f"\n{r['checkpoint']} without its --quantization: exit {r['exit_code']} "
              f"({'pass' if r['passed'] else 'FAIL'}): {r['message'][-200:]}")
    if failures:
        print("\nFAILED:")
        for f in failures:
            print(f"  - {f}")
    print(f"\nJSON: {os.path.join(args.out, 'quant_compare.json')}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
