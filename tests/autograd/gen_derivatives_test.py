"""tools/codegen/gen_derivatives.py refuses each kind of broken derivatives.json with one line that
names the culprit, and accepts the real one."""
import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GEN = os.path.join(ROOT, "tools", "codegen", "gen_derivatives.py")
OPS = os.path.join(ROOT, "dispatcher", "ops", "ops.json")
DERIV = os.path.join(ROOT, "dispatcher", "ops", "derivatives.json")


class GenDerivativesTest(unittest.TestCase):
    def setUp(self):
        with open(DERIV, encoding="utf-8") as f:
            self.base = json.load(f)
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def run_gen(self, data):
        path = os.path.join(self.tmp.name, "derivatives.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f)
        out = os.path.join(self.tmp.name, "out.inc")
        r = subprocess.run([sys.executable, GEN, OPS, path, "--out", out], capture_output=True, text=True)
        return r.returncode, r.stderr.strip(), out

    def entry(self, d, name):
        return next(e for e in d["derivatives"] if e["name"] == name)

    def test_real_file_generates_every_formula(self):
        rc, err, out = self.run_gen(self.base)
        self.assertEqual(rc, 0, err)
        with open(out, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("void backward_mul_Tensor(FormulaContext& c)", text)
        self.assertIn('{"_linear_epilogue", DerivativeKind::NotImplemented', text)
        self.assertIn("void backward__resize(FormulaContext& c)", text)
        # An op with several outputs reads the others as result1, ... (topk's indices).
        self.assertIn("const Tensor result1 = c.result(1);", text)

    def test_unlisted_op(self):
        d = copy.deepcopy(self.base)
        d["derivatives"] = [e for e in d["derivatives"] if e["name"] != "exp"]
        rc, err, _ = self.run_gen(d)
        self.assertNotEqual(rc, 0)
        self.assertIn("op(s) exp of ops.json are not in", err)

    def test_unknown_op(self):
        d = copy.deepcopy(self.base)
        d["not_implemented"]["no_such_op"] = "x"
        rc, err, _ = self.run_gen(d)
        self.assertIn("names op 'no_such_op', which ops.json does not declare", err)

    def test_unknown_argument(self):
        d = copy.deepcopy(self.base)
        self.entry(d, "mul.Tensor")["self"] = "mul(grad, othr)"
        rc, err, _ = self.run_gen(d)
        self.assertIn("'othr' is not an argument of", err)

    def test_unknown_function(self):
        d = copy.deepcopy(self.base)
        self.entry(d, "exp")["self"] = "mul(grad, frobnicate(result))"
        rc, err, _ = self.run_gen(d)
        self.assertIn("'frobnicate' is neither an op of the contract nor a declared helper", err)

    def test_tensor_argument_without_formula(self):
        d = copy.deepcopy(self.base)
        del self.entry(d, "mul.Tensor")["other"]
        rc, err, _ = self.run_gen(d)
        self.assertIn("mul.Tensor: tensor argument(s) other have no formula", err)

    def test_key_that_is_not_a_tensor_argument(self):
        d = copy.deepcopy(self.base)
        self.entry(d, "add.Tensor")["alpha"] = "grad"
        rc, err, _ = self.run_gen(d)
        self.assertIn("'alpha' is not a tensor argument", err)

    def test_listed_twice(self):
        d = copy.deepcopy(self.base)
        d["non_differentiable"]["ops"].append("exp")
        rc, err, _ = self.run_gen(d)
        self.assertIn("op 'exp' is listed twice", err)


if __name__ == "__main__":
    unittest.main()
