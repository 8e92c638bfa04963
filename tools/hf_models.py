"""Shared by tools/hf_compare.py and tools/make_golden.py: HF models with seeded random weights,
and torch set to IEEE fp32 for references.

Weights are drawn larger than HF's 0.02 init (matrices ~ N(0, 1/fan_in), embeddings N(0, 1),
norm gains U(0.8, 1.2), biases U(-0.1, 0.1)) so that logits spread and greedy ties are improbable.
"""
import subprocess

import torch
import transformers


def make_config(cls_name, kwargs, rope=None):
    """A transformers config; rope: a rope-scaling dict (rope_type, factor, ...) or None."""
    config = getattr(transformers, cls_name)(**kwargs)
    if rope is not None:  # transformers 5 keeps rope settings in rope_parameters
        if hasattr(config, "rope_parameters"):
            config.rope_parameters = dict(rope, rope_theta=kwargs["rope_theta"])
        else:
            config.rope_scaling = dict(rope)
    return config


def random_model(config, seed, device="cpu"):
    """An fp32 model of config with the seeded random weights described above."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5 if "embed" not in n else 1.0)
            elif "norm" in n:
                p.uniform_(0.8, 1.2)
            else:  # biases
                p.uniform_(-0.1, 0.1)
    return model


def randomize(model, seed):
    """model's parameters redrawn with the seeded weights described above (a vision-language
    model's LayerNorm gains too: names with "norm" or "ln_q")."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("norm" in name or "ln_q" in name) and name.endswith("weight"):
                p.uniform_(0.8, 1.2)
            elif p.dim() >= 2:
                std = 1.0 if "embed_tokens" in name else p[0].numel() ** -0.5
                p.normal_(0.0, std)
            else:
                p.uniform_(-0.1, 0.1)


def load_fp32(cls, path, **kwargs):
    """cls.from_pretrained(path) in fp32 for inference (transformers 5's dtype, 4's torch_dtype)."""
    try:
        return cls.from_pretrained(path, dtype=torch.float32, **kwargs).eval()
    except TypeError:
        return cls.from_pretrained(path, torch_dtype=torch.float32, **kwargs).eval()


def ieee_fp32():
    """No TF32 anywhere: plain fp32 matmuls for the reference."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    # PyTorch >= 2.9 also has per-backend fp32 precision settings; ask for IEEE fp32 there too.
    for backend in (getattr(torch.backends.cuda, "matmul", None), torch.backends.cudnn):
        if backend is not None and hasattr(backend, "fp32_precision"):
            backend.fp32_precision = "ieee"


def run_tool(argv, rows, **row):
    """Runs one of inferbench's bench tools. On failure prints its output, appends row with the
    tool's error to rows and returns None; otherwise the CompletedProcess."""
    run = subprocess.run(argv, capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        rows.append(dict(row, error=run.stderr.strip()))
        return None
    return run
