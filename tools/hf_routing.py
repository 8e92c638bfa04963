"""Routing decisions of a transformers mixture-of-experts model (Mixtral, DeepSeek-V2) against
inferbench's (`generate --dump-routing`), for tools/hf_compare.py: where a bf16 run routes a token
to other experts than the fp32 reference, and how near the reference's choice was to a tie.

The reference's routing is recomputed from what its MoE blocks receive (forward pre-hooks on each
decoder layer's block that holds a router, a parameter named gate.weight), in float64 with the
published rule: softmax over the experts, for DeepSeek's group_limited_greedy the topk_group
groups of the largest probability kept (ties to the lower group), then the top-k (ties to the lower
id). The margin of a choice is the probability gap across the cut: the k-th kept expert's minus
the next one's, or across the group cut, whichever is smaller. Its relative margin divides it by
the probability at that cut (the k-th kept expert's, or the last kept group's best): below 2 % a
bf16 run's rounding decides the choice (tools/routing_verdict.py).
"""
import json
import math

import numpy as np


def moe_blocks(model):
    """(layer index, block, router weight) of every decoder layer whose MLP routes."""
    found = []
    for i, layer in enumerate(model.model.layers):
        for _, module in layer.named_children():
            weight = dict(module.named_parameters()).get("gate.weight")
            if weight is not None:
                found.append((i, module, weight))
    return found


def route(logits, config, k):
    """(the experts one token goes to (ascending), the margin of that choice, the probability at
    the cut that gives the margin: the k-th kept expert's, or the last kept group's best where the
    group cut's margin is the smaller); margin / cut probability is the relative margin."""
    p = np.exp(logits - logits.max())
    p /= p.sum()
    margin, cut = math.inf, math.inf
    groups = int(getattr(config, "n_group", 1) or 1)
    if getattr(config, "topk_method", "greedy") == "group_limited_greedy" and groups > 1:
        kept = int(config.topk_group)
        best = p.reshape(groups, -1).max(axis=1)
        order = sorted(range(groups), key=lambda g: (-best[g], g))
        if kept < groups:
            margin, cut = best[order[kept - 1]] - best[order[kept]], best[order[kept - 1]]
        keep = np.zeros(groups, dtype=bool)
        keep[order[:kept]] = True
        p = np.where(np.repeat(keep, len(p) // groups), p, 0.0)
    order = sorted(range(len(p)), key=lambda e: (-p[e], e))
    if k < len(p) and p[order[k - 1]] - p[order[k]] < margin:
        margin, cut = p[order[k - 1]] - p[order[k]], p[order[k - 1]]
    return sorted(int(e) for e in order[:k]), float(margin), float(cut)


def relative_margin(margin, cut):
    """margin / cut probability (inf where there is no cut, or nothing at it)."""
    return margin / cut if 0 < cut < math.inf else math.inf


class MoeInputs:
    """Within `with MoeInputs(model) as captured:`, what each MoE block receives is kept in
    captured.inputs ({layer: hidden states}), so the reference's forward that gives the logits
    gives the routing too."""

    def __init__(self, model):
        self.blocks = moe_blocks(model)
        if not self.blocks:
            raise RuntimeError("no decoder layer of the reference has a block with a gate.weight "
                               "router")
        self.inputs = {}
        self.hooks = []

    def __enter__(self):
        def keep(i):
            def hook(_module, args, kwargs):
                x = args[0] if args else kwargs["hidden_states"]
                self.inputs[i] = x.detach()
            return hook

        self.hooks = [block.register_forward_pre_hook(keep(i), with_kwargs=True)
                      for i, block, _ in self.blocks]
        return self

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()
        return False

    def routing(self, config, first):
        """{layer: [(experts, margin, cut probability) per position from `first`]}: the
        reference's routing of each generated step's input token (position first + step)."""
        k = int(config.num_experts_per_tok)
        out = {}
        for i, _, weight in self.blocks:
            x = self.inputs[i]
            x = x.reshape(-1, x.shape[-1])[first:].double().cpu().numpy()
            logits = x @ weight.detach().double().cpu().numpy().T
            out[i] = [route(row, config, k) for row in logits]
        return out


def routing_differences(dump_path, reference):
    """Each (step, layer) where inferbench's routing (its --dump-routing file) differs from the
    reference's, with the reference's margin there, the probability at its cut and the relative
    margin (margin / cut probability)."""
    with open(dump_path) as f:
        steps = json.load(f)["steps"]
    found = []
    for step, layers in enumerate(steps):
        for layer, ref in reference.items():
            if step >= len(ref) or layer >= len(layers):
                continue
            engine = sorted(int(e) for e in layers[layer])
            experts, margin, cut = ref[step]
            if engine != experts:
                found.append(dict(step=step, layer=layer, engine=engine, reference=experts,
                                  margin=margin, cut_probability=cut,
                                  relative_margin=relative_margin(margin, cut)))
    return found
