#!/usr/bin/env python3
# The layering check (scripts/check-layers against src/layers.txt): the tree as it is passes, and an
# upward or sideways include, a stale exception, a folder missing from the table each fail by name;
# docs/architecture.md shows the table as it is.
# BuildTest proves the build itself stops: a copy of the repository with an upward include is
# configured, and building its first library fails in check_layers, before anything compiles.
# Usage: check_layers_test.py [CheckerTest|BuildTest] (BuildTest reads AIRLOCK_CMAKE, AIRLOCK_GENERATOR
# and AIRLOCK_MAKE_PROGRAM from the environment tests/CMakeLists.txt sets).
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKER = os.path.join(ROOT, "scripts", "check-layers")
UPWARD = '#include "broker/session.h"'


def add_include(path, line):
    """Puts `line` after the file's first #include and returns its line number."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    at = next(i for i, l in enumerate(lines) if l.startswith("#include")) + 1
    lines.insert(at, line)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return at + 1


class CheckerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="airlock-layers-")
        self.addCleanup(shutil.rmtree, self.tmp)
        shutil.copytree(os.path.join(ROOT, "src"), os.path.join(self.tmp, "src"))

    def src(self, rel):
        return os.path.join(self.tmp, "src", rel)

    def check(self, root=None, *extra):
        p = subprocess.run([sys.executable, CHECKER, "--root", root or self.tmp, *extra],
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def test_the_tree_as_it_is_passes_and_writes_its_stamp(self):
        stamp = os.path.join(self.tmp, "layers.stamp")
        code, out = self.check(ROOT, "--stamp", stamp)
        self.assertEqual(code, 0, out)
        self.assertTrue(os.path.exists(stamp))
        code, out = self.check()
        self.assertEqual(code, 0, out)

    def test_the_architecture_doc_shows_the_table_as_it_is(self):
        code, table = self.check(ROOT, "--markdown")
        self.assertEqual(code, 0, table)
        with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
            doc = f.read()
        begin = doc.index("<!-- begin layers: scripts/check-layers --markdown -->\n")
        start = doc.index("\n", begin) + 1
        shown = doc[start:doc.index("<!-- end layers -->", start)]
        self.assertEqual(shown, table, "docs/architecture.md differs from src/layers.txt: paste the output of "
                                       "scripts/check-layers --markdown between its markers")

    def test_an_upward_include_fails_naming_the_file_and_the_rule(self):
        n = add_include(self.src("base/error.h"), UPWARD)
        stamp = os.path.join(self.tmp, "layers.stamp")
        code, out = self.check(None, "--stamp", stamp)
        self.assertEqual(code, 1, out)
        self.assertIn(f'src/base/error.h:{n}: includes "broker/session.h": base may not depend on broker '
                      "(see src/layers.txt)", out)
        self.assertFalse(os.path.exists(stamp))

    def test_a_sideways_include_fails(self):
        n = add_include(self.src("egress/door.cpp"), '#include "ledger/receipts.h"')
        code, out = self.check()
        self.assertEqual(code, 1, out)
        self.assertIn(f'src/egress/door.cpp:{n}: includes "ledger/receipts.h": egress may not depend on ledger', out)

    def except_line(self, line):
        with open(self.src("layers.txt"), "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def test_an_exception_covers_its_one_file_only(self):
        # broker/session.cpp may include linux/cgroup.h (an exception); broker/protocol.cpp may not.
        self.except_line("except broker/session.cpp -> linux/cgroup.h  # the test's exception")
        add_include(self.src("broker/session.cpp"), '#include "linux/cgroup.h"')
        n = add_include(self.src("broker/protocol.cpp"), '#include "linux/cgroup.h"')
        code, out = self.check()
        self.assertEqual(code, 1, out)
        self.assertIn(f'src/broker/protocol.cpp:{n}: includes "linux/cgroup.h": broker may not depend on linux', out)
        self.assertNotIn("src/broker/session.cpp", out)

    def test_an_exception_whose_include_is_gone_fails(self):
        self.except_line("except broker/session.cpp -> linux/cgroup.h  # the test's exception")
        code, out = self.check()
        self.assertEqual(code, 1, out)
        self.assertRegex(out, r"src/layers.txt:\d+: the exception broker/session.cpp -> linux/cgroup.h "
                              r"matches no include: delete it")

    def test_a_folder_missing_from_the_table_fails(self):
        os.mkdir(self.src("newfolder"))
        with open(self.src("newfolder/thing.h"), "w", encoding="utf-8") as f:
            f.write('#pragma once\n#include "base/error.h"\n')
        code, out = self.check()
        self.assertEqual(code, 1, out)
        self.assertIn("src/newfolder/: a folder src/layers.txt does not list", out)

    def test_a_table_naming_a_folder_above_it_is_refused(self):
        # Bottom up: a dependency on a folder listed later would allow a cycle.
        with open(self.src("layers.txt"), encoding="utf-8") as f:
            text = f.read()
        with open(self.src("layers.txt"), "w", encoding="utf-8") as f:
            f.write(text.replace("\nbase:", "\nbase: cli", 1))
        code, out = self.check()
        self.assertEqual(code, 2, out)
        self.assertRegex(out, r"src/layers.txt:\d+: base names cli, which is not listed above it")

    def test_an_exception_without_a_reason_is_refused(self):
        with open(self.src("layers.txt"), "a", encoding="utf-8") as f:
            f.write("except base/fs.h -> broker/session.h\n")
        code, out = self.check()
        self.assertEqual(code, 2, out)
        self.assertIn("an exception needs its reason", out)


class BuildTest(unittest.TestCase):
    def test_the_build_fails_on_an_upward_include(self):
        cmake = os.environ.get("AIRLOCK_CMAKE", "cmake")
        tmp = tempfile.mkdtemp(prefix="airlock-layers-build-")
        self.addCleanup(shutil.rmtree, tmp)
        tree = os.path.join(tmp, "tree")
        # The repository as it is on disk, but for what configuring without tests never reads: build
        # trees, git, caches (.cache holds the agent CLIs) and tests/ (node_modules among them).
        def skip(d, names):
            top = os.path.samefile(d, ROOT)
            return [n for n in names if n == "node_modules" or (top and (n[0] == "." or n.startswith("build")
                                                                          or n == "tests"))]
        shutil.copytree(ROOT, tree, ignore=skip, symlinks=True)
        n = add_include(os.path.join(tree, "src", "base", "fs.h"), UPWARD)
        configure = [cmake, "-S", tree, "-B", os.path.join(tmp, "build"), "-DBUILD_TESTING=OFF",
                     "-G", os.environ.get("AIRLOCK_GENERATOR", "Ninja")]
        if os.environ.get("AIRLOCK_MAKE_PROGRAM"):
            configure.append("-DCMAKE_MAKE_PROGRAM=" + os.environ["AIRLOCK_MAKE_PROGRAM"])
        p = subprocess.run(configure, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        # The first library's objects: they wait for check_layers, so nothing compiles when it fails.
        p = subprocess.run([cmake, "--build", os.path.join(tmp, "build"), "--target", "airlock_base"],
                           capture_output=True, text=True, timeout=300)
        out = p.stdout + p.stderr
        self.assertNotEqual(p.returncode, 0, out)
        self.assertIn(f'src/base/fs.h:{n}: includes "broker/session.h": base may not depend on broker', out)
        self.assertNotIn("Building CXX object", out)


if __name__ == "__main__":
    unittest.main()
