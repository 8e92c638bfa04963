#!/usr/bin/env python3
"""Unit tests of tools/routing_verdict.py (ctest: routing_verdict_test; stdlib only).

Usage: python3 tools/routing_verdict_test.py
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from routing_verdict import summary, verdict  # noqa: E402

TOL = 1e-2


def diff(step, layer=1, relative_margin=1e-3):
    return dict(step=step, layer=layer, engine=[0, 2], reference=[0, 1],
                margin=relative_margin * 0.05, relative_margin=relative_margin)


class VerdictTest(unittest.TestCase):
    def test_no_differences_pass(self):
        v = verdict([5e-3, 7e-3, 6e-3, 4e-3], [], TOL)
        self.assertTrue(v["passed"])
        self.assertEqual(v["max_rel_l2_routed_alike"], 7e-3)
        self.assertEqual(v["near_tie_steps"], [])
        self.assertEqual(summary(v), "pass")

    def test_no_differences_fail(self):
        v = verdict([5e-3, 1.2e-2, 6e-3, 4e-3], [], TOL)
        self.assertFalse(v["passed"])
        self.assertEqual(v["max_rel_l2_routed_alike"], 1.2e-2)
        self.assertIn("step 1", v["reason"])
        self.assertEqual(summary(v), "FAIL")

    def test_near_tie_flip_excused(self):
        # deepseek-v2-lite bf16, 24 tokens: one flip at step 4 (margin 6.3e-5), 2.64e-2 there.
        errors = [5e-3, 6e-3, 7e-3, 5e-3, 2.64e-2, 6e-3, 5e-3, 6e-3]
        v = verdict(errors, [diff(4, relative_margin=3e-3)], TOL)
        self.assertTrue(v["passed"], v["reason"])
        self.assertEqual(v["max_rel_l2_routed_alike"], 7e-3)
        self.assertEqual(v["near_tie_steps"], [4])
        self.assertEqual(v["near_tie_rel_l2"], [2.64e-2])
        self.assertEqual(summary(v), "pass (1 near-tie step: 2.64e-02)")

    def test_flip_at_large_relative_margin_fails(self):
        errors = [5e-3, 6e-3, 7e-3, 5e-3, 2.64e-2, 6e-3, 5e-3, 6e-3]
        v = verdict(errors, [diff(4, relative_margin=0.3)], TOL)
        self.assertFalse(v["passed"])
        self.assertEqual(v["near_tie_steps"], [])
        self.assertEqual(v["flipped_steps"], [4])
        self.assertIn("relative margin", v["reason"])

    def test_flip_at_large_margin_fails_even_within_tolerance(self):
        v = verdict([5e-3] * 8, [diff(2, relative_margin=0.5)], TOL)
        self.assertFalse(v["passed"])

    def test_near_tie_boundary_is_not_excused(self):
        v = verdict([5e-3] * 8, [diff(2, relative_margin=2e-2)], TOL)
        self.assertFalse(v["passed"])
        v = verdict([5e-3] * 8, [diff(2, relative_margin=0.1)], TOL, near_tie=0.2)
        self.assertTrue(v["passed"], v["reason"])

    def test_other_steps_above_tolerance_fail(self):
        errors = [5e-3, 1.1e-2, 7e-3, 5e-3, 2.64e-2, 6e-3, 5e-3, 6e-3]
        v = verdict(errors, [diff(4)], TOL)
        self.assertFalse(v["passed"])
        self.assertEqual(v["max_rel_l2_routed_alike"], 1.1e-2)
        self.assertEqual(v["near_tie_steps"], [4])
        self.assertIn("step 1", v["reason"])
        self.assertEqual(summary(v), "FAIL (1 near-tie step: 2.64e-02)")

    def test_more_than_a_quarter_excused_fails(self):
        errors = [2e-2, 5e-3, 2e-2, 5e-3, 2e-2, 5e-3, 5e-3, 5e-3]
        v = verdict(errors, [diff(0), diff(2), diff(4)], TOL)
        self.assertFalse(v["passed"])
        self.assertEqual(v["near_tie_steps"], [0, 2, 4])
        self.assertIn("quarter", v["reason"])

    def test_a_quarter_excused_passes(self):
        errors = [2e-2, 5e-3, 2e-2, 5e-3, 5e-3, 5e-3, 5e-3, 5e-3]
        v = verdict(errors, [diff(0), diff(2)], TOL)
        self.assertTrue(v["passed"], v["reason"])
        self.assertEqual(summary(v), "pass (2 near-tie steps: 2.00e-02, 2.00e-02)")

    def test_two_layers_one_not_near_tie_fails(self):
        errors = [5e-3, 6e-3, 7e-3, 2e-2, 5e-3, 6e-3, 5e-3, 6e-3]
        diffs = [diff(3, layer=1, relative_margin=1e-3), diff(3, layer=2, relative_margin=0.4)]
        v = verdict(errors, diffs, TOL)
        self.assertFalse(v["passed"])
        self.assertEqual(v["near_tie_steps"], [])
        self.assertEqual(v["flipped_steps"], [3])
        self.assertEqual(v["max_rel_l2_routed_alike"], 7e-3)

    def test_two_layers_both_near_tie_pass(self):
        errors = [5e-3, 6e-3, 7e-3, 2e-2, 5e-3, 6e-3, 5e-3, 6e-3]
        diffs = [diff(3, layer=1, relative_margin=1e-3), diff(3, layer=2, relative_margin=1e-2)]
        v = verdict(errors, diffs, TOL)
        self.assertTrue(v["passed"], v["reason"])
        self.assertEqual(v["near_tie_steps"], [3])

    def test_missing_relative_margin_is_not_near_tie(self):
        d = diff(1)
        del d["relative_margin"]
        self.assertFalse(verdict([5e-3] * 8, [d], TOL)["passed"])

    def test_every_step_excused_fails(self):
        v = verdict([2e-2], [diff(0)], TOL)
        self.assertFalse(v["passed"])
        self.assertIsNone(v["max_rel_l2_routed_alike"])

    def test_no_steps_fails(self):
        self.assertFalse(verdict([], [], TOL)["passed"])

    def test_difference_past_the_steps_is_an_error(self):
        with self.assertRaises(ValueError):
            verdict([5e-3] * 4, [diff(4)], TOL)


if __name__ == "__main__":
    unittest.main()
