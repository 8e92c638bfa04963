"""The verdict of a low-precision (bf16/fp16) mixture-of-experts row of tools/hf_compare.py, where
a step whose router chose other experts than the fp32 reference is judged by its margin (stdlib
only, so that tools/routing_verdict_test.py runs anywhere).

The rule. bf16 keeps 8 significant bits (3.9e-3 relative per rounding), and a router's input has
gone through many roundings (every layer below it), so a choice whose two sides differ by less than
2 % of the probability at the cut (relative margin = margin / cut probability < near_tie = 2e-2;
tools/hf_routing.py: the k-th kept expert's probability, or the kept group's best at the group
cut) is decided by rounding, not by the kernels: transformers' own bf16 run, teacher-forced on the
same tokens, is 2.2e-2 and 2.5e-2 off the fp32 reference on the two DeepSeek-V2-Lite rows where
inferbench's bf16 flips such a near tie (bench/results/h200/mla/after). A step where that happened takes its logits from other experts than the
reference's, so its error is no measure of the kernels. Hence a row passes when
  - every step with a routing difference is a near-tie step (all its differences, in every layer,
    below near_tie); a flip at a larger margin is a wrong router and is NOT excused;
  - every other step (routed alike) is within the tolerance; and
  - at most a quarter of the steps are excused (more would leave too little judged).
Without routing differences this is the plain rule: every step within the tolerance. Each excused
step is still reported with its error (near_tie_rel_l2; hf_compare prints it in the result).
"""
import math

NEAR_TIE = 2e-2


def _relative_margin(difference):
    """A difference's relative margin; one recorded without it counts as no near tie."""
    value = difference.get("relative_margin")
    return math.inf if value is None else float(value)


def verdict(rel_l2_per_step, routing_differences, tolerance, near_tie=NEAR_TIE):
    """A dict: max_rel_l2_routed_alike (max over the steps without a routing difference; None if
    none), near_tie_steps (sorted; steps whose every difference has relative_margin < near_tie),
    near_tie_rel_l2 (their errors, in that order), flipped_steps (sorted steps with a difference
    not all near ties), passed (the rule of this module's docstring) and reason (one line).
    routing_differences: tools/hf_routing.py routing_differences()'s dicts (step, layer, ...,
    relative_margin)."""
    errors = [float(e) for e in rel_l2_per_step]
    steps = len(errors)
    by_step = {}
    for d in routing_differences:
        step = int(d["step"])
        if not 0 <= step < steps:
            raise ValueError(f"routing difference at step {step} of a row of {steps} steps")
        by_step.setdefault(step, []).append(d)
    near = sorted(s for s, ds in by_step.items()
                  if all(_relative_margin(d) < near_tie for d in ds))
    flipped = sorted(set(by_step) - set(near))
    alike = [e for s, e in enumerate(errors) if s not in by_step]
    worst = max(alike) if alike else None
    out = dict(max_rel_l2_routed_alike=worst, near_tie_steps=near,
               near_tie_rel_l2=[errors[s] for s in near], flipped_steps=flipped,
               passed=False, reason="")
    if steps == 0:
        out["reason"] = "no steps"
        return out
    if flipped:
        rel = min(_relative_margin(d) for s in flipped for d in by_step[s]
                  if _relative_margin(d) >= near_tie)
        out["reason"] = (f"routing flip at relative margin {rel:.1e} >= {near_tie:.0e} "
                         f"(step{'s' if len(flipped) > 1 else ''} "
                         f"{', '.join(map(str, flipped))})")
        return out
    if 4 * len(near) > steps:
        out["reason"] = (f"{len(near)} of {steps} steps are near-tie flips, more than a quarter")
        return out
    if worst > tolerance:
        step = next(s for s, e in enumerate(errors) if s not in by_step and e == worst)
        out["reason"] = (f"max rel L2 {worst:.2e} at step {step} (routed alike) > "
                         f"{tolerance:.0e}")
        return out
    out["passed"] = True
    if near:
        out["reason"] = (f"routed alike max {worst:.2e} <= {tolerance:.0e}; excused near-tie "
                         f"step{'s' if len(near) > 1 else ''} "
                         + ", ".join(f"{s} ({errors[s]:.2e})" for s in near))
    else:
        out["reason"] = f"max rel L2 {worst:.2e} <= {tolerance:.0e}"
    return out


def summary(v):
    """The verdict as the result column shows it: "pass", "FAIL", with the excused steps' errors,
    e.g. "pass (1 near-tie step: 2.64e-02)"."""
    word = "pass" if v["passed"] else "FAIL"
    near = v["near_tie_rel_l2"]
    if not near:
        return word
    plural = "s" if len(near) > 1 else ""
    return f"{word} ({len(near)} near-tie step{plural}: {', '.join(f'{e:.2e}' for e in near)})"
