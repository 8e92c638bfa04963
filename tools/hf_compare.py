#!/usr/bin/env python3
"""inferbench against HF transformers on the very same safetensors files, by logits.

For each family (the real hidden size, heads, KV heads, FFN, vocabulary, rope and window of the
published model; fewer layers to keep it quick) this builds the HF model from a config with seeded
random weights, saves it with save_pretrained (safetensors, bf16) and drops the live model. The
reference is then loaded from those saved files in fp32 (from_pretrained(dir, dtype=float32); eager
attention, TF32 off), so that no buffer (the rotary inv_freq) was ever cast: casting a live model
to bf16 and back leaves inv_freq 0.33 % off and the reference drifts with position.

`inferbench generate` runs the same directory greedily (--dump-logits) on each backend and dtype.
HF's logits are computed teacher-forced on the tokens inferbench chose (one forward pass over
prompt + generated tokens), and every generated step is compared by relative L2 error:
  - fp32 (CPU and CUDA): <= 1e-4 at every step;
  - bf16 (CUDA): <= 1e-2 at every step (MoE near-tie routing flips: below).
Prompts of 24, 512, 2,048 and 4,096 tokens; Mistral also one longer than its 4,096 window, and
Phi-3-mini's 2,047 window is passed by the 4,096 prompt. Mixtral (MixtralForCausalLM at
Mixtral-8x7B's sizes, and "mixtral-tiny" at toy sizes) runs with the same tolerances: its router
(softmax in fp32, top-2, renormalised) must pick the same experts at every position (in bf16, but
for near ties: below); a backend without MoE ops refuses it, listed as not run. Prints a Markdown
table and writes JSON.

Every row records each step's error (rel_l2_per_step); mixture-of-experts rows also each (step,
layer) whose experts differ from the reference's, with the reference's margin and relative margin
(the gap across the cut over the probability at it; tools/hf_routing.py). An fp32 row keeps the
plain rule. A bf16 (or fp16) row with routing differences is judged by tools/routing_verdict.py: a
step whose every difference is a near tie (relative margin < 2e-2, decided by bf16 rounding, as
transformers' own bf16 run, 2.2-2.5e-2 off on V2-Lite's rows with such a flip, shows) takes its logits from other
experts and is excused; the steps routed alike must be within the tolerance, a flip at a larger
margin fails, and at most a quarter of the steps may be excused. Each excused step is still printed
with its error, e.g. "pass (1 near-tie step: 2.64e-02)".

Usage (GPU machine): tools/hf_compare.py --inferbench build/bin/inferbench --out DIR
Gemma-2 (Gemma2ForCausalLM at Gemma-2-9B's sizes with a 5,000-token prompt past its 4,096
window, and "gemma2-tiny" with a 64-token window) runs with the same tolerances:
  tools/hf_compare.py --families gemma2-tiny,gemma2 --runs cpu:fp32 \
      --json-name hf_compare_gemma2.json --out DIR
DeepSeek-V2 (DeepseekV2ForCausalLM: "deepseek-v2-lite" at DeepSeek-V2-Lite's sizes, 2 layers = the
dense first layer and one MoE layer; "deepseek-v2-tiny" with V2's q LoRA and group-limited
routing at toy sizes), CPU and CUDA (with IB_CUDA_MLA=0 CUDA refuses it, listed as not run):
  tools/hf_compare.py --families deepseek-v2-tiny,deepseek-v2-lite --runs cpu:fp32,cuda:fp32 \
      --json-name hf_compare_deepseek_v2.json --out DIR
Mixtral only, CPU and CUDA fp32:
  tools/hf_compare.py --families mixtral-tiny,mixtral --runs cpu:fp32,cuda:fp32,cuda:bf16 \
      --json-name hf_compare_mixtral.json --out DIR
"""
import argparse
import json
import shlex
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers

from hf_models import ieee_fp32, make_config, random_model
from hf_routing import MoeInputs, routing_differences
from routing_verdict import NEAR_TIE, summary, verdict

LLAMA3_ROPE = dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=8192)
FAMILIES = {
    # name: (config class, kwargs of the published config, rope scaling or None, prompt lengths)
    "llama-3": ("LlamaConfig", dict(  # meta-llama/Meta-Llama-3-8B
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, rope_theta=500000.0, rms_norm_eps=1e-5,
        max_position_embeddings=8192, bos_token_id=128000, eos_token_id=128001,
        tie_word_embeddings=False), None, (24, 512, 2048, 4096)),
    "llama-3.2": ("LlamaConfig", dict(  # meta-llama/Llama-3.2-1B: llama3 rope scaling, tied
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, rope_theta=500000.0, rms_norm_eps=1e-5,
        max_position_embeddings=131072, bos_token_id=128000, eos_token_id=128001,
        tie_word_embeddings=True), LLAMA3_ROPE, (24, 512, 2048, 4096)),
    "qwen2": ("Qwen2Config", dict(  # Qwen/Qwen2-7B: q/k/v biases
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
        num_key_value_heads=4, rope_theta=1000000.0, rms_norm_eps=1e-6,
        max_position_embeddings=32768, use_sliding_window=False, tie_word_embeddings=False),
        None, (24, 512, 2048, 4096)),
    "mistral": ("MistralConfig", dict(  # mistralai/Mistral-7B-v0.1: sliding window 4,096
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, rope_theta=10000.0, rms_norm_eps=1e-5,
        max_position_embeddings=32768, sliding_window=4096, tie_word_embeddings=False),
        None, (24, 512, 2048, 4096, 5000)),
    "phi-3-mini": ("Phi3Config", dict(  # microsoft/Phi-3-mini-4k-instruct: fused qkv / gate_up
        vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_attention_heads=32,
        num_key_value_heads=32, rope_theta=10000.0, rms_norm_eps=1e-5,
        # 4,096 in the published file; raised so that the 4,096-token prompt can generate past
        # it (without rope scaling the limit changes no computation).
        max_position_embeddings=8192, original_max_position_embeddings=4096,
        sliding_window=2047, bos_token_id=1, eos_token_id=32000, pad_token_id=32000,
        tie_word_embeddings=False), None, (24, 512, 2048, 4096)),
    "mixtral": ("MixtralConfig", dict(  # mistralai/Mixtral-8x7B-v0.1: 8 experts, top-2
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
        rope_theta=1000000.0, rms_norm_eps=1e-5, max_position_embeddings=32768,
        sliding_window=None, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False),
        None, (24, 512, 2048, 4096)),
    "mixtral-tiny": ("MixtralConfig", dict(  # Mixtral's structure at toy sizes, for quick CPU rows
        vocab_size=32000, hidden_size=256, intermediate_size=512, num_attention_heads=8,
        num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
        rope_theta=1000000.0, rms_norm_eps=1e-5, max_position_embeddings=32768,
        sliding_window=None, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False),
        None, (24, 512, 2048, 4096)),
    "gemma2": ("Gemma2Config", dict(  # google/gemma-2-9b: soft-capping, sandwich norms, GeGLU,
        # even layers local (window 4,096), odd layers global; tied embeddings
        vocab_size=256000, hidden_size=3584, intermediate_size=14336, num_attention_heads=16,
        num_key_value_heads=8, head_dim=256, query_pre_attn_scalar=256, rope_theta=10000.0,
        rms_norm_eps=1e-6, max_position_embeddings=8192, sliding_window=4096,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0,
        tie_word_embeddings=True), None, (24, 512, 2048, 4096, 5000)),
    "gemma2-27b": ("Gemma2Config", dict(  # google/gemma-2-27b: head_dim 128 (CUDA runs it),
        # query_pre_attn_scalar = hidden / heads = 144, not head_dim
        vocab_size=256000, hidden_size=4608, intermediate_size=36864, num_attention_heads=32,
        num_key_value_heads=16, head_dim=128, query_pre_attn_scalar=144, rope_theta=10000.0,
        rms_norm_eps=1e-6, max_position_embeddings=8192, sliding_window=4096,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0,
        tie_word_embeddings=True), None, (24, 512, 2048, 4096, 5000)),
    "gemma2-tiny": ("Gemma2Config", dict(  # Gemma-2's structure at toy sizes: a 64-token window
        # (every prompt past 64 crosses it), query_pre_attn_scalar unlike head_dim
        vocab_size=32000, hidden_size=256, intermediate_size=512, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, query_pre_attn_scalar=48, rope_theta=10000.0,
        rms_norm_eps=1e-6, max_position_embeddings=8192, sliding_window=64,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0,
        tie_word_embeddings=True), None, (24, 512, 2048, 4096)),
    "deepseek-v2-lite": ("DeepseekV2Config", dict(  # deepseek-ai/DeepSeek-V2-Lite: MLA without q
        # LoRA (kv_lora_rank 512, rope 64, nope 128, v 128), YaRN x40, first layer dense, 64
        # routed experts top-6 (greedy, no renormalisation) + 2 shared
        vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64, n_shared_experts=2,
        num_experts_per_tok=6, first_k_dense_replace=1, kv_lora_rank=512, q_lora_rank=None,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, topk_method="greedy",
        n_group=1, topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=False,
        rope_theta=10000.0, rms_norm_eps=1e-6, max_position_embeddings=163840,
        bos_token_id=100000, eos_token_id=100001, tie_word_embeddings=False),
        dict(rope_type="yarn", factor=40.0, original_max_position_embeddings=4096, mscale=0.707,
             mscale_all_dim=0.707, beta_fast=32, beta_slow=1), (24, 512, 2048, 4096)),
    "deepseek-v2-tiny": ("DeepseekV2Config", dict(  # DeepSeek-V2's structure at toy sizes: q LoRA,
        # group-limited routing (4 groups, 2 kept), routed_scaling_factor, and a YaRN attention
        # factor that is not 1 (mscale 1.0 against mscale_all_dim 0.5)
        vocab_size=32000, hidden_size=256, intermediate_size=512, moe_intermediate_size=64,
        num_attention_heads=8, num_key_value_heads=8, n_routed_experts=16, n_shared_experts=2,
        num_experts_per_tok=4, first_k_dense_replace=1, kv_lora_rank=64, q_lora_rank=96,
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
        topk_method="group_limited_greedy", n_group=4, topk_group=2, routed_scaling_factor=2.0,
        norm_topk_prob=False, rope_theta=10000.0, rms_norm_eps=1e-6,
        max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False),
        dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=2048, mscale=1.0,
             mscale_all_dim=0.5, beta_fast=32, beta_slow=1), (24, 512, 2048, 4096)),
}
# Mixture-of-experts families: a backend that has no MoE ops yet refuses them (exit 2, naming
# what is missing); such a row is listed as not run, with the refusal, rather than failed.
# DeepSeek-V2 (multi-head latent attention): CUDA refuses it with IB_CUDA_MLA=0.
DEEPSEEK_FAMILIES = {"deepseek-v2-lite", "deepseek-v2-tiny"}
MOE_FAMILIES = {"mixtral", "mixtral-tiny"} | DEEPSEEK_FAMILIES
# Gemma-2: the CUDA attention kernels take head_dim 64, 96 and 128; the 9B shapes' 256 is refused
# the same way.
GEMMA_FAMILIES = {"gemma2", "gemma2-27b", "gemma2-tiny"}
REFUSABLE_FAMILIES = MOE_FAMILIES | GEMMA_FAMILIES
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2}


class Refused(RuntimeError):
    """inferbench refused the run as a user error (exit 2)."""


def save_random_model(name, layers, seed, directory):
    """Seeded random weights saved in bf16; the live model is dropped, never reused."""
    cls_name, kwargs, rope, _ = FAMILIES[name]
    config = make_config(cls_name, dict(kwargs, num_hidden_layers=layers), rope)
    model = random_model(config, seed, device="cuda")
    if name in DEEPSEEK_FAMILIES:
        # transformers 5 holds the routed experts fused in 3-D parameters (E, 2F, D) and
        # (E, D, F), which random_model leaves at U(-0.1, 0.1): drawn like every matrix instead.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if p.dim() == 3:
                    p.normal_(0.0, 1.0 / p.shape[2] ** 0.5)
    if name in GEMMA_FAMILIES:
        # Gemma multiplies the embeddings by sqrt(hidden) and ties them to the lm_head: drawn
        # N(0, 1 / hidden) the residual starts at unit scale and the logits stay well inside the
        # final soft-cap (30), where tanh still separates them (N(0, 1) would saturate it).
        with torch.no_grad():
            model.model.embed_tokens.weight.mul_(config.hidden_size ** -0.5)
    model.to(torch.bfloat16).save_pretrained(directory)  # safetensors
    del model
    torch.cuda.empty_cache()
    if name in DEEPSEEK_FAMILIES:
        published_deepseek_layout(directory)
    elif name in MOE_FAMILIES:
        published_mixtral_layout(directory)


def rewrite_checkpoint(directory, wants, convert):
    """Rewrites each safetensors file of directory holding a tensor whose name wants(name) is
    true: every tensor goes through convert(name, tensor), which returns the (name, tensor) pairs
    to save instead; the shard index follows. Other files are left alone."""
    import glob
    from safetensors.torch import load_file, save_file
    weight_map = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        tensors = load_file(path)
        if any(wants(n) for n in tensors):
            tensors = dict(pair for n, t in tensors.items() for pair in convert(n, t))
            save_file(tensors, path, metadata={"format": "pt"})
        for n in tensors:
            weight_map[n] = os.path.basename(path)
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            meta = json.load(f)
        meta["weight_map"] = dict(sorted(weight_map.items()))
        with open(index, "w") as f:
            json.dump(meta, f, indent=2)


def split_experts(gate_up_or_down, stacked, names):
    """A fused expert tensor (E, 2F, D) gate then up, or (E, D, F), as each expert's tensors under
    names(e) = (gate, up, down)."""
    if gate_up_or_down == "gate_up":
        f = stacked.shape[1] // 2
        for e in range(stacked.shape[0]):
            yield names(e)[0], stacked[e, :f].contiguous()
            yield names(e)[1], stacked[e, f:].contiguous()
    else:
        for e in range(stacked.shape[0]):
            yield names(e)[2], stacked[e].contiguous()


def published_mixtral_layout(directory):
    """Mixtral's experts as the published checkpoints hold them, which inferbench reads:
    block_sparse_moe.gate.weight (E, D) and block_sparse_moe.experts.J.w1 / w3 (F, D), w2 (D, F).
    transformers 5 names the block `mlp` and, saved with save_original_format=False, fuses the
    experts into mlp.experts.gate_up_proj (E, 2F, D; each expert's rows gate (w1), then up (w3),
    as MixtralExperts chunks its output) and mlp.experts.down_proj (E, D, F); such files are
    rewritten here (and the shard index with them). Files already in the published layout are
    left alone. transformers loads either layout, so the reference is unaffected."""
    import re
    layer_mlp = re.compile(r"^(model\.layers\.\d+\.)mlp\.(.+)$")

    def convert(n, t):
        m = layer_mlp.match(n)
        if not m:
            yield n, t
            return
        block, rest = m.group(1) + "block_sparse_moe.", m.group(2)
        names = lambda e: tuple(f"{block}experts.{e}.{w}.weight" for w in ("w1", "w3", "w2"))
        if rest == "gate.weight":
            yield block + "gate.weight", t
        elif rest in ("experts.gate_up_proj", "experts.down_proj"):
            yield from split_experts(rest[len("experts."):-len("_proj")], t, names)
        else:
            raise RuntimeError(f"unexpected Mixtral tensor {n} {tuple(t.shape)}")

    rewrite_checkpoint(directory, lambda n: layer_mlp.match(n) is not None, convert)


def published_deepseek_layout(directory):
    """DeepSeek-V2's experts as the published checkpoints hold them, which inferbench reads:
    mlp.experts.J.gate_proj / up_proj (F, D) and down_proj (D, F). transformers 5, saved with
    save_original_format=False, fuses them into mlp.experts.gate_up_proj (E, 2F, D; each expert's
    rows gate, then up, as DeepseekV2Experts chunks its output) and mlp.experts.down_proj
    (E, D, F); such files are rewritten here (and the shard index with them). Files already in
    the published layout are left alone; transformers loads either."""
    import re
    fused = re.compile(r"^(model\.layers\.\d+\.mlp\.experts\.)(gate_up|down)_proj$")

    def convert(n, t):
        m = fused.match(n)
        if not m:
            yield n, t
            return
        names = lambda e: tuple(f"{m.group(1)}{e}.{w}_proj.weight" for w in ("gate", "up", "down"))
        yield from split_experts(m.group(2), t, names)

    rewrite_checkpoint(directory, lambda n: fused.match(n) is not None, convert)


def load_reference(directory):
    """The saved files, reloaded in fp32 (eager attention: plain fp32 matmuls)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager").to("cuda").eval()
    rotary = getattr(model.model, "rotary_emb", None)
    return model, getattr(rotary, "rope_type", "?")


def load_hf_lowp(directory, dtype):
    """The saved files loaded by transformers itself in bf16/fp16 (from the files, never a cast
    live model): the "hf:bf16" baseline, what HF's own low-precision run loses to its fp32 one."""
    return transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[dtype],
        attn_implementation="eager").to("cuda").eval()


def run_inferbench(binary, directory, device, dtype, prompt, steps, out_npy, extra=()):
    cmd = [binary, "generate", "--model", directory, "--device", device, "--dtype", dtype,
           "--load-format", "safetensors", "--prompt-token-ids", ",".join(map(str, prompt)),
           "--max-tokens", str(steps), "--dump-logits", out_npy, *extra]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 2:
        raise Refused(proc.stderr.strip()[-400:])
    if proc.returncode != 0:
        raise RuntimeError(f"inferbench failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["token_ids"], np.load(out_npy), time.time() - t0


@torch.no_grad()
def hf_step_logits(model, prompt, tokens):
    """HF's logits at each generated step, teacher-forced on inferbench's tokens."""
    ids = torch.tensor([prompt + tokens[:-1]], device="cuda")
    logits = model(ids, logits_to_keep=len(tokens)).logits[0]
    return logits.float().cpu().numpy()  # (steps, vocab)


def reference_step(model, prompt, tokens, routed):
    """(tokens, HF's step logits, and with `routed` the reference's routing of each step from the
    same forward pass: tools/hf_routing.py; a routing that cannot be read is the reason, a str, and
    the logits still count)."""
    if not routed:
        return tokens, hf_step_logits(model, prompt, tokens), None
    try:
        captured = MoeInputs(model)
    except Exception as e:
        return tokens, hf_step_logits(model, prompt, tokens), describe_error(e)[-300:]
    with captured:
        logits = hf_step_logits(model, prompt, tokens)
    try:
        return tokens, logits, captured.routing(model.config, len(prompt) - 1)
    except Exception as e:
        return tokens, logits, describe_error(e)[-300:]


def compare(ref, tokens, logits):
    """max and mean relative L2 of the step logits against ref, every step's (rel_l2_per_step),
    and how many leading greedy tokens ref's argmax agrees with."""
    rel = np.linalg.norm(logits - ref, axis=1) / np.linalg.norm(ref, axis=1)
    hf_argmax = ref.argmax(axis=1)
    first_mismatch = next((i for i, (a, b) in enumerate(zip(hf_argmax, tokens)) if a != b), None)
    return dict(max_rel_l2=float(rel.max()), mean_rel_l2=float(rel.mean()),
                rel_l2_per_step=[float(x) for x in rel],
                greedy_equal_steps=len(tokens) if first_mismatch is None else first_mismatch)


def describe_error(e):
    """The exception and the ones it came from (transformers' lazy imports hide the cause)."""
    parts, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        parts.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return " <- ".join(parts)


def save_json(args, rows):
    """Rewritten after every row, so a run stopped at its time limit keeps what it measured."""
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, args.json_name)
    with open(path + ".tmp", "w") as f:
        json.dump(dict(transformers=transformers.__version__, torch=torch.__version__,
                       tolerance=TOLERANCE, near_tie_relative_margin=NEAR_TIE,
                       steps=args.steps, layers=args.layers,
                       reference="from_pretrained(saved bf16 files, dtype=float32), eager, "
                                 "TF32 off", rows=rows), f, indent=2)
    os.replace(path + ".tmp", path)


def print_table(rows, keys, mean=True):
    """rows as a Markdown table: the columns `keys` ("prompt_len" headed "prompt"), then max (and
    mean) rel L2, greedy agreement, tolerance and the verdict (a row judged by
    tools/routing_verdict.py names its excused near-tie steps' errors); errors and skipped rows
    say so."""
    heads = [("prompt" if k == "prompt_len" else k) for k in keys]
    heads += ["max rel L2"] + (["mean rel L2"] if mean else []) + ["greedy = HF", "tolerance",
                                                                   "result"]
    print("| " + " | ".join(heads) + " |")
    print("| " + " | ".join("---" if h in ("family", "backend", "dtype", "mode", "result")
                            else "---:" for h in heads) + " |")
    blanks = len(heads) - len(keys) - 1
    for r in rows:
        if "error" in r:
            cells = [r["family"]] + ["-"] * (len(heads) - 2) + [f"ERROR: {r['error'][:200]}"]
        elif "skipped" in r:
            cells = [str(r[k]) for k in keys] + ["-"] * blanks
            cells.append(f"not run ({r['skipped'][:200]})")
        else:
            cells = [str(r[k]) for k in keys] + [f"{r['max_rel_l2']:.2e}"]
            cells += [f"{r['mean_rel_l2']:.2e}"] if mean else []
            if r["passed"] is None:
                result = "baseline"
            elif "near_tie_rel_l2" in r:
                result = summary(r)
            else:
                result = "pass" if r["passed"] else "FAIL"
            cells += [f"{r['greedy_equal_steps']}/{r['steps']}", f"{r['tolerance']:.0e}", result]
        print("| " + " | ".join(cells) + " |")


def print_routing(rows):
    """The mixture-of-experts rows' routing differences (the first four of each), with the
    reference's margin and relative margin, the step's error and the row's verdict."""
    routed = [r for r in rows if "routing_differences" in r]
    if routed:
        print("\nRouting against the fp32 reference (mixture-of-experts rows; the margin is the "
              "reference's probability gap across the top-k (or group) cut, the relative margin "
              f"that over the probability at the cut; below {NEAR_TIE:.0e} a bf16 flip is a near "
              "tie, tools/routing_verdict.py):")
        for r in routed:
            diffs = r["routing_differences"]
            where = "; ".join(f"step {f['step']} layer {f['layer']}: {f['engine']} vs "
                              f"{f['reference']}, margin {f['margin']:.1e} (relative "
                              f"{f['relative_margin']:.1e}), step rel L2 "
                              f"{r['rel_l2_per_step'][f['step']]:.2e}" for f in diffs[:4])
            more = f"; {len(diffs) - 4} more" if len(diffs) > 4 else ""
            print(f"- {r['family']} {r['backend']} {r['dtype']} {r['prompt_len']}: "
                  f"{len(diffs)} differing (step, layer)" + (f" ({where}{more})" if diffs else "")
                  + (f"; verdict: {r['reason']}" if "reason" in r else ""))


def add_common_args(ap):
    """The arguments every HF comparison takes: the binary, the output directory, the model's
    layers, the greedy steps compared and the seed of weights and prompts."""
    ap.add_argument("--inferbench", default="build/bin/inferbench")
    ap.add_argument("--out", default=".")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap)
    ap.add_argument("--families",
                    default=",".join(f for f in FAMILIES if f not in REFUSABLE_FAMILIES),
                    help="comma-separated; the default leaves out the mixture-of-experts and "
                         f"Gemma-2 ones ({', '.join(sorted(REFUSABLE_FAMILIES))}), which are "
                         "asked for by name")
    ap.add_argument("--runs", default="cuda:fp32,cuda:bf16,cpu:fp32",
                    help="backend:dtype pairs to compare; hf:bf16 (or hf:fp16), after an "
                         "inferbench run, adds transformers' own bf16 model teacher-forced on "
                         "that run's tokens as a baseline row (not judged)")
    ap.add_argument("--cpu-max-len", type=int, default=4096,
                    help="longest prompt the CPU backend runs (rows above it are listed as such)")
    ap.add_argument("--models-dir", default="",
                    help="save the models here and reuse them when present (default: a "
                         "temporary directory per family)")
    ap.add_argument("--json-name", default="hf_compare.json")
    ap.add_argument("--inferbench-args", default="",
                    help="more flags for every inferbench generate, e.g. "
                         "'--tensor-parallel-size 2' (issue 19's parity at TP 2)")
    ap.add_argument("--deadline-s", type=float, default=0,
                    help="stop starting rows after this many seconds (0: none); rows not run "
                         "are listed as such")
    args = ap.parse_args()
    ieee_fp32()
    t_start = time.time()
    runs = [tuple(r.split(":")) for r in args.runs.split(",")]
    rows, ok = [], True
    for name in args.families.split(","):
        lengths = FAMILIES[name][3]
        with tempfile.TemporaryDirectory(prefix=f"hfcmp-{name}-") as tmp:
            d = os.path.join(args.models_dir, name) if args.models_dir else tmp
            try:
                if not os.path.exists(os.path.join(d, "config.json")):
                    save_random_model(name, args.layers, args.seed, d)
                model, rope_type = load_reference(d)
                lowp = {}  # hf:bf16 baselines' models, loaded when first asked for
                vocab = model.config.vocab_size
                rng = np.random.default_rng(args.seed)
                for length in lengths:
                    prompt = [int(x) for x in rng.integers(0, vocab, size=length)]
                    ref = None
                    for device, dtype in runs:
                        row = dict(family=name, layers=args.layers, backend=device, dtype=dtype,
                                   prompt_len=length, rope_type=rope_type)
                        if device == "cpu" and length > args.cpu_max_len:
                            rows.append(dict(row, skipped=f"CPU rows stop at {args.cpu_max_len}"))
                            continue
                        if args.deadline_s and time.time() - t_start > args.deadline_s:
                            rows.append(dict(row, skipped="deadline"))
                            continue
                        if device == "hf":
                            if ref is None:
                                rows.append(dict(row, skipped="an hf row follows an inferbench row"))
                                continue
                            if dtype not in lowp:
                                lowp[dtype] = load_hf_lowp(d, dtype)
                            t0 = time.time()
                            logits = hf_step_logits(lowp[dtype], prompt, ref[0])
                            r = dict(row, steps=len(ref[0]), seconds=round(time.time() - t0, 2),
                                     **compare(ref[1], ref[0], logits))
                            r["tolerance"] = TOLERANCE[dtype]
                            r["passed"] = None  # a baseline: what transformers' bf16 loses
                            rows.append(r)
                            save_json(args, rows)
                            print(f"{name} hf {dtype} {length}: max rel L2 "
                                  f"{r['max_rel_l2']:.2e} (baseline)", flush=True)
                            continue
                        # Mixture-of-experts rows: inferbench's routing beside the reference's.
                        dump = (os.path.join(tmp, f"{device}-{dtype}-routing.json")
                                if name in MOE_FAMILIES else None)
                        try:
                            tokens, logits, secs = run_inferbench(
                                args.inferbench, d, device, dtype, prompt, args.steps,
                                os.path.join(tmp, f"{device}-{dtype}.npy"),
                                (*shlex.split(args.inferbench_args),
                                 *(("--dump-routing", dump) if dump else ())))
                        except Refused as e:
                            if name not in REFUSABLE_FAMILIES:
                                raise
                            rows.append(dict(row, skipped=f"refused: {e}"))
                            save_json(args, rows)
                            print(f"{name} {device} {dtype} {length}: refused: {e}", flush=True)
                            continue
                        # inferbench's greedy tokens can differ between runs (bf16); the
                        # reference follows each run's own tokens.
                        if ref is None or ref[0] != tokens:
                            ref = reference_step(model, prompt, tokens, bool(dump))
                        r = dict(row, steps=len(tokens), seconds=round(secs, 2),
                                 **compare(ref[1], tokens, logits))
                        if dump and isinstance(ref[2], str):
                            r["routing_error"] = ref[2]
                            print(f"{name}: the reference's routing was not read: {ref[2]}",
                                  flush=True)
                        elif dump:
                            # Where a bf16 near-tie flips an expert (issue 15: report the step).
                            r["routing_differences"] = routing_differences(dump, ref[2])
                            for f in r["routing_differences"]:
                                print(f"{name} {device} {dtype} {length}: step {f['step']} "
                                      f"layer {f['layer']} routes to {f['engine']}, the "
                                      f"reference to {f['reference']} (its margin "
                                      f"{f['margin']:.2e}, relative "
                                      f"{f['relative_margin']:.2e}; the step's rel L2 "
                                      f"{r['rel_l2_per_step'][f['step']]:.2e})", flush=True)
                        r["tolerance"] = TOLERANCE[dtype]
                        if dtype != "fp32" and r.get("routing_differences"):
                            # Near-tie flips excused, each still shown (tools/routing_verdict.py).
                            r.update(verdict(r["rel_l2_per_step"], r["routing_differences"],
                                             TOLERANCE[dtype]))
                            print(f"{name} {device} {dtype} {length}: {summary(r)}: "
                                  f"{r['reason']}", flush=True)
                        else:
                            r["passed"] = r["max_rel_l2"] <= TOLERANCE[dtype]
                        ok &= r["passed"]
                        rows.append(r)
                        save_json(args, rows)
                        print(f"{name} {device} {dtype} {length}: max rel L2 "
                              f"{r['max_rel_l2']:.2e} ({secs:.1f} s)", flush=True)
                del model, lowp
                torch.cuda.empty_cache()
            except Exception as e:  # report and go on with the next family
                ok = False
                rows.append(dict(family=name, error=describe_error(e)[-800:], passed=False))
                print(f"{name}: ERROR {describe_error(e)[-600:]}", flush=True)
    save_json(args, rows)
    print(f"\nhf_compare (transformers {transformers.__version__}, torch {torch.__version__}; "
          f"reference reloaded from the saved files in fp32, TF32 off; {args.layers} layers, "
          f"{args.steps} greedy steps, relative L2 of every step's logits)")
    print_table(rows, ["family", "backend", "dtype", "prompt_len"])
    print_routing(rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
