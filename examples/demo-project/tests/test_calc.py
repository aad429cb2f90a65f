"""Tests of src/calc.py, run under airlock by `make run`."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
import calc  # noqa: E402


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_mean(self):
        self.assertEqual(calc.mean([1, 2, 3, 4]), 2.5)

    def test_mean_of_nothing_raises(self):
        with self.assertRaises(ValueError):
            calc.mean([])


class ConfinementTest(unittest.TestCase):
    """What the sandbox itself guarantees, seen from inside. Each tier says no in its own way:
    Landlock denies (EACCES), the namespaces tier shows no such file or a read-only root."""

    def test_host_files_outside_the_workspace_are_unreadable(self):
        with self.assertRaises(OSError):
            open("/etc/shadow").read()

    def test_writes_outside_the_view_fail(self):
        with self.assertRaises(OSError):
            open("/etc/airlock-demo-escape", "w").write("x")

    def test_no_network(self):
        import socket
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", 9), timeout=1)


if __name__ == "__main__":
    unittest.main()
