#!/usr/bin/env python3
"""Turns dispatcher/ops/derivatives.json into the autograd library's table of backward formulas.

Checks, each failing with one line that names the culprit:
  - every op of ops.json is listed exactly once: with formulas, as an in-place op using another op's
    formulas, as non-differentiable, or as not implemented (with the reason), and every name listed
    is an op of ops.json;
  - every formula key names tensor arguments of its op's schema, and every tensor argument of an op
    with formulas has a formula or is marked "non_differentiable";
  - a formula calls only ops of the contract (by their C++ name), the declared helpers and factories,
    or Tensor methods, and names only 'grad', 'result' (output 0; 'result1', ... the others), the op's
    arguments and '<tensor arg>_sizes'.

Usage: gen_derivatives.py ops.json derivatives.json --out autograd_derivatives.inc
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_ops  # noqa: E402  (the schema parser of the op contract)

TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(?P<id>[A-Za-z_]\w*)|(?P<str>\"[^\"]*\")|(?P<op>::|\S))")
CPP_WORDS = {"true", "false"}


def fail(message):
    sys.stderr.write("gen_derivatives.py: %s\n" % message)
    sys.exit(1)


def tokens(expr, where):
    pos, out = 0, []
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            if expr[pos:].strip() == "":
                break
            fail("%s: cannot read the formula at '%s'" % (where, expr[pos:]))
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def cpp_local(arg, index, sizes=False):
    """The declaration of a formula's local variable for schema argument `arg`."""
    if sizes:
        if arg.is_list:
            return "const std::vector<std::vector<int64_t>> %s_sizes = c.list_sizes(%d);" % (arg.name, index)
        return "const SavedSizes %s_sizes = c.sizes(%d);" % (arg.name, index)
    base, opt = arg.base, arg.optional
    if base == "Tensor":
        if arg.is_list:
            return "const std::vector<Tensor> %s = c.tensor_list(%d);" % (arg.name, index)
        if opt:
            return "const std::optional<Tensor> %s = c.opt_tensor(%d);" % (arg.name, index)
        return "const Tensor %s = c.tensor(%d);" % (arg.name, index)
    if arg.array:
        return "const std::vector<int64_t> %s = c.ints(%d);" % (arg.name, index)
    table = {"Scalar": ("Scalar", "scalar", "opt_scalar"), "int": ("int64_t", "int_", "opt_int"),
             "float": ("double", "float_", "opt_float"), "bool": ("bool", "bool_", None),
             "str": ("std::string", "str", None), "ScalarType": ("DType", "dtype", "opt_dtype")}
    if base not in table:
        fail("argument '%s' has a type (%s) formulas cannot read" % (arg.name, arg.typ))
    typ, getter, opt_getter = table[base]
    if opt:
        if not opt_getter:
            fail("argument '%s' has a type (%s) formulas cannot read" % (arg.name, arg.typ))
        return "const std::optional<%s> %s = c.%s(%d);" % (typ, arg.name, opt_getter, index)
    return "const %s %s = c.%s(%d);" % (typ, arg.name, getter, index)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ops_json")
    ap.add_argument("derivatives_json")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    _, ops = gen_ops.load(a.ops_json)
    by_name = {name: (args, entry) for name, args, entry in ops}
    callable_ops = {name.split(".")[0] for name, _, entry in ops if entry["api"] != "none"}
    try:
        with open(a.derivatives_json, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        fail("cannot read %s: %s" % (a.derivatives_json, e))
    if d.get("format") != 1:
        fail("%s: expected \"format\": 1" % a.derivatives_json)
    helpers = set(d.get("helpers", []))
    factories = set(d.get("factories", []))
    functions = callable_ops | helpers | factories
    listed = {}

    def mark(name, how):
        if name not in by_name:
            fail("%s names op '%s', which ops.json does not declare" % (how, name))
        if name in listed:
            fail("op '%s' is listed twice (%s and %s)" % (name, listed[name], how))
        listed[name] = how

    nondiff = d.get("non_differentiable", {})
    for name in nondiff.get("ops", []):
        mark(name, "non_differentiable")
    for name in d.get("not_implemented", {}):
        mark(name, "not_implemented")
    rows, bodies = [], []
    row_of = {}
    for entry in d.get("derivatives", []):
        name = entry.get("name")
        if not name:
            fail("a derivatives entry lacks \"name\"")
        mark(name, "derivatives")
        args, _ = by_name[name]
        index = {arg.name: i for i, arg in enumerate(args)}
        tensor_args = {arg.name for arg in args if arg.is_tensor}
        covered, nondiff_mask, saved_mask, saves_result = set(), 0, 0, False
        blocks = []
        for key, formula in entry.items():
            if key == "name":
                continue
            names = [k.strip() for k in key.split(",")]
            for n in names:
                if n not in tensor_args:
                    fail("%s: '%s' is not a tensor argument of \"%s\"" % (name, n, by_name[name][1]["schema"]))
                if n in covered:
                    fail("%s: argument '%s' has two formulas" % (name, n))
                covered.add(n)
            if formula == "non_differentiable":
                for n in names:
                    nondiff_mask |= 1 << index[n]
                continue
            where = "%s (%s)" % (name, key)
            toks = tokens(formula, where)
            used, locals_ = set(), []
            for i, (kind, text) in enumerate(toks):
                if kind != "id":
                    continue
                prev = toks[i - 1][1] if i > 0 else ""
                nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
                if prev in (".", "::"):
                    continue  # a Tensor method or a qualified name
                if nxt == "(":
                    if text not in functions:
                        fail("%s: '%s' is neither an op of the contract nor a declared helper or factory" % (where, text))
                    continue
                if text in CPP_WORDS or text == "grad":
                    continue
                if re.fullmatch(r"result\d*", text):  # result: output 0; result1, result2, ...: the others
                    saves_result = True
                    continue
                if text.endswith("_sizes") and text[:-6] in tensor_args:
                    used.add((text[:-6], True))
                    continue
                if text not in index:
                    fail("%s: '%s' is not an argument of \"%s\" (nor grad, result or <arg>_sizes)" %
                         (where, text, by_name[name][1]["schema"]))
                used.add((text, False))
            for n, sizes in sorted(used):
                arg = args[index[n]]
                if arg.is_tensor and not sizes:
                    saved_mask |= 1 << index[n]
                locals_.append(cpp_local(arg, index[n], sizes))
            for out_name in sorted({t for k, t in toks if k == "id" and re.fullmatch(r"result\d*", t)}):
                locals_.append("const Tensor %s = c.result(%s);" % (out_name, out_name[6:] or "0"))
            idx = [index[n] for n in names]
            cond = " || ".join("c.needs(%d)" % i for i in idx)
            if len(names) > 1:
                setter = "c.set_many({%s}, %s);" % (", ".join(str(i) for i in idx), formula)
            elif args[idx[0]].is_list:
                setter = "c.set_list(%d, %s);" % (idx[0], formula)
            else:
                setter = "c.set(%d, %s);" % (idx[0], formula)
            body = "".join("    %s\n" % l for l in locals_)
            blocks.append("  if (%s) {\n%s    %s\n  }\n" % (cond, body, setter))
        missing = tensor_args - covered
        if missing:
            fail("%s: tensor argument(s) %s have no formula; give one or mark them \"non_differentiable\"" %
                 (name, ", ".join(sorted(missing))))
        fn = "backward_" + re.sub(r"\W", "_", name)
        bodies.append("// %s\nvoid %s(FormulaContext& c) {\n  const Tensor& grad = c.grad(0);\n%s}\n" %
                      (by_name[name][1]["schema"], fn, "".join(blocks)))
        row_of[name] = (fn, saved_mask, saves_result, nondiff_mask)
        rows.append('  {"%s", DerivativeKind::Formula, &%s, 0x%xull, %s, 0x%xull, ""},' %
                    (name, fn, saved_mask, "true" if saves_result else "false", nondiff_mask))
    for name, functional in d.get("inplace", {}).items():
        mark(name, "inplace")
        if functional not in row_of:
            fail("inplace: '%s' maps to '%s', which has no formulas in derivatives" % (name, functional))
        names = [arg.name for arg in by_name[name][0]]
        if names != [arg.name for arg in by_name[functional][0]]:
            fail("inplace: '%s' and '%s' have different arguments" % (name, functional))
        fn, saved_mask, saves_result, nondiff_mask = row_of[functional]
        rows.append('  {"%s", DerivativeKind::Formula, &%s, 0x%xull, %s, 0x%xull, ""},' %
                    (name, fn, saved_mask, "true" if saves_result else "false", nondiff_mask))
    why_nd = nondiff.get("why", "")
    for name in nondiff.get("ops", []):
        rows.append('  {"%s", DerivativeKind::NonDifferentiable, nullptr, 0, false, 0, "%s"},' % (name, why_nd))
    for name, why in d.get("not_implemented", {}).items():
        rows.append('  {"%s", DerivativeKind::NotImplemented, nullptr, 0, false, 0, "%s"},' % (name, why))
    unlisted = [name for name, _, _ in ops if name not in listed]
    if unlisted:
        fail("op(s) %s of ops.json are not in %s: give each a formula, or list it under non_differentiable or "
             "not_implemented" % (", ".join(unlisted), os.path.basename(a.derivatives_json)))
    text = ("// Generated by tools/codegen/gen_derivatives.py from dispatcher/ops/derivatives.json. Do not edit.\n"
            "using namespace ::tessera;\nusing namespace ::tessera::autograd::formulas;\n\n" + "\n".join(bodies) +
            "\nconst DerivativeInfo kDerivatives[] = {\n" + "\n".join(rows) + "\n};\n")
    gen_ops.write_text(a.out, text)


if __name__ == "__main__":
    main()
