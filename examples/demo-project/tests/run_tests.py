"""Runs the demo's tests and writes a summary to reports/, which the policy writes back."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
suite = unittest.defaultTestLoader.discover(here)
result = unittest.TextTestRunner(verbosity=2).run(suite)
os.makedirs("reports", exist_ok=True)
with open(os.path.join("reports", "summary.txt"), "w") as f:
    f.write(f"ran {result.testsRun}, failures {len(result.failures)}, errors {len(result.errors)}\n")
sys.exit(0 if result.wasSuccessful() else 1)
