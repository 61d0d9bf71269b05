#!/usr/bin/env python3
"""Generates the C++ views of the op contract from dispatcher/ops/ops.json (Note [Op contract]).

  gen_ops.py OPS_JSON [--catalogue OUT.inc] [--names OUT.h] [--info OUT.h] [--api-decls OUT.h]
                      [--api-defs OUT.inc]

--catalogue: the table of the dispatcher's operators (included by op_catalogue.cpp).
--names:     tessera/op_names.h for kernels: one struct per operator with its name and the indices
             of its tensor inputs and attributes, so that a misspelt op or argument does not compile.
--info:      tessera/op_info.h, the OpInfo table every consumer reads (Note [OpInfo]): name,
             overload, arguments, tags, shape rule, sizes rule, provider.
--api-decls: tessera/ops_generated.h, the public functions of the plain ops (included by ops.h).
--api-defs:  their definitions (included by dispatcher/src/ops.cpp).

Python 3 standard library only. Exits 1 with a one-line message naming the op and the problem.
"""
import argparse
import json
import re
import sys

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME = re.compile(r"^[a-z_][a-z0-9_]*(\.[A-Za-z0-9_]+)?$")
BASE_TYPES = {"Tensor", "Scalar", "int", "float", "bool", "str", "ScalarType"}


def fail(message):
    sys.stderr.write("gen_ops.py: %s\n" % message)
    sys.exit(1)


def split_top_level(text):
    """Splits on commas outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, False, ""
    for ch in text:
        if ch == '"':
            quote = not quote
        elif not quote and ch in "[(":
            depth += 1
        elif not quote and ch in "])":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def parse_schema(schema):
    """Returns (full name, [Arg], returns text)."""
    m = re.match(r"^([^(\s]+)\((.*)\)\s*->\s*(.+)$", schema)
    if not m:
        fail("schema '%s' is not 'name(args) -> returns'" % schema)
    name, args_text = m.group(1), m.group(2)
    if not NAME.match(name):
        fail("op name '%s' is not a lower-case identifier with an optional '.overload'" % name)
    args = []
    for a in split_top_level(args_text):
        if a == "*":
            continue
        decl, _, default = a.partition("=")
        pieces = decl.strip().rsplit(" ", 1)
        if len(pieces) != 2:
            fail("%s: argument '%s' needs a type and a name" % (name, a))
        typ, arg = pieces
        base = re.sub(r"\(.*\)|\[\d*\]|\?", "", typ)
        if base not in BASE_TYPES:
            fail("%s: argument '%s' has unknown type '%s'" % (name, arg, typ))
        if not IDENT.match(arg):
            fail("%s: argument name '%s' is not an identifier" % (name, arg))
        is_tensor = base == "Tensor"
        args.append(Arg(typ, arg, is_tensor, is_tensor and "[]" in typ, base, "?" in typ,
                        "[" in typ, default.strip() if default else None))
    return name, args, m.group(3).strip()


class Arg:
    def __init__(self, typ, name, is_tensor, is_list, base, optional, array, default):
        self.typ, self.name, self.is_tensor, self.is_list = typ, name, is_tensor, is_list
        self.base, self.optional, self.array, self.default = base, optional, array, default

    def __iter__(self):  # (type, name, is_tensor, is_tensor_list), as the generators below unpack it
        return iter((self.typ, self.name, self.is_tensor, self.is_list))


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            contract = json.load(f)
    except (OSError, ValueError) as e:
        fail("cannot read %s: %s" % (path, e))
    if contract.get("format") != 1:
        fail("%s: expected \"format\": 1, got %r" % (path, contract.get("format")))
    tags = contract.get("tags", {})
    seen = set()
    ops = []
    for entry in contract.get("ops", []):
        for key in ("schema", "shape_rule", "tags", "doc"):
            if key not in entry:
                fail("op %r lacks \"%s\"" % (entry.get("schema", "?"), key))
        for key in entry:
            if key not in KNOWN_KEYS:
                fail("op %r: unknown key \"%s\"; known: %s" % (entry["schema"], key, ", ".join(KNOWN_KEYS)))
        name, args, returns = parse_schema(entry["schema"])
        if name in seen:
            fail("op '%s' is declared twice" % name)
        seen.add(name)
        for key in ("shape_rule", "sizes"):
            if key in entry and not IDENT.match(entry[key]):
                fail("%s: %s '%s' is not an identifier" % (name, key, entry[key]))
        for t in entry["tags"]:
            if t not in tags:
                fail("%s: unknown tag '%s'; declared tags: %s" % (name, t, ", ".join(sorted(tags))))
        if "\n" in entry["doc"] or not entry["doc"]:
            fail("%s: doc must be one non-empty line" % name)
        provider = entry.get("provider", "builtin")
        if not IDENT.match(provider):
            fail("%s: provider '%s' is not a plugin name" % (name, provider))
        api = entry.get("api", "generated" if api_eligible(name, args, returns, entry) else "none")
        if api not in ("generated", "manual", "none"):
            fail("%s: api must be \"generated\", \"manual\" or \"none\", got '%s'" % (name, api))
        if api == "generated":
            why = api_blocker(name, args, returns, entry)
            if why:
                fail("%s: \"api\": \"generated\" needs a plain op, but %s; write it in ops.cpp and say "
                     "\"api\": \"manual\"" % (name, why))
        entry = dict(entry, provider=provider, api=api, returns=returns)
        ops.append((name, args, entry))
    return tags, ops


KNOWN_KEYS = ("schema", "shape_rule", "sizes", "tags", "doc", "provider", "api")


def api_blocker(name, args, returns, entry):
    """Why the op cannot have a generated public function (None when it can)."""
    if name.startswith("_"):
        return "its name is private (leading '_')"
    if "inplace" in entry["tags"] or returns != "Tensor":
        return "it does not return one fresh Tensor"
    if entry.get("provider", "builtin") != "builtin":
        return "a plugin provides it"
    if not args or not args[0].is_tensor or args[0].optional or args[0].is_list:
        return "its first argument is not a Tensor"
    for a in args:
        if a.is_list or (a.base, a.array) not in CPP_TYPES:
            return "argument '%s' has type %s" % (a.name, a.typ)
    return None


def api_eligible(name, args, returns, entry):
    return api_blocker(name, args, returns, entry) is None


# (base type, is array) -> C++ parameter type; optional types are wrapped in std::optional.
CPP_TYPES = {
    ("Tensor", False): "const Tensor&",
    ("Scalar", False): "const Scalar&",
    ("int", False): "int64_t",
    ("int", True): "IntArrayRef",
    ("float", False): "double",
    ("bool", False): "bool",
    ("str", False): "const std::string&",
    ("ScalarType", False): "DType",
}


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def struct_name(name):
    return name.replace(".", "_")


HEADER = "// Generated by tools/codegen/gen_ops.py from ops.json; do not edit.\n"


def write_text(path, text):
    """Writes `text` unless the file already holds it (the build then rebuilds only what changed)."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        fail("cannot write %s: %s" % (path, e))


def gen_catalogue(tag_names, ops):
    out = [HEADER, "// The shape rule (meta function meta_<rule>) of each op, in the order of tessera::op::kOpInfos;\n"
                   "// the includer defines TESSERA_META(rule).\n"]
    for name, _, entry in ops:
        out.append("TESSERA_META(%s)  // %s\n" % (entry["shape_rule"], name))
    return "".join(out)


def camel(s):
    return "".join(p[:1].upper() + p[1:] for p in s.split("_"))


def sizes_rules(ops):
    rules = []
    for _, _, entry in ops:
        r = entry.get("sizes")
        if r and r not in rules:
            rules.append(r)
    return rules


def gen_info(tag_names, ops):
    out = [HEADER,
           "// Note [OpInfo]\n"
           "// The op contract as data, for every consumer inside the runtime and the compiler: one OpInfo\n"
           "// per op of dispatcher/ops/ops.json, in file order. The dispatcher defines its operators from\n"
           "// it (with the shape rule meta_<shape_rule>), capture evaluates the op's sizes rule on symbolic\n"
           "// sizes (shape::output_sizes in dispatcher/src/shape_rules.h, the template the shape rule runs\n"
           "// on concrete sizes), passes read tags instead of names, and `tessera ops` prints provider and\n"
           "// tags. Ops with a provider other than \"builtin\" are defined by the dispatcher from the\n"
           "// contract and get their kernels from that plugin.\n",
           "#pragma once\n#include <cstdint>\n#include <string_view>\n\n",
           "namespace tessera::op {\n\n"]
    out.append("// The tags of ops.json, one bit each.\nenum Tag : uint32_t {\n")
    for i, t in enumerate(tag_names):
        out.append("  kTag%s = 1u << %d,  // %s\n" % (camel(t), i, tag_names[t]))
    out.append("};\n// Their names, index i for bit 1u << i.\n")
    out.append("inline constexpr const char* kTagNames[] = {%s};\n" % ", ".join(c_string(t) for t in tag_names))
    out.append("inline constexpr int kNumTags = %d;\n\n" % len(tag_names))
    rules = sizes_rules(ops)
    out.append("// The sizes rules named by ops.json (\"sizes\"), each a template shape::rules::<name> over the\n"
               "// size type (Note [Shape rules]). None: the op has no rule for symbolic sizes.\n")
    out.append("#define TESSERA_OP_SIZES_RULES(X) %s\n" % " ".join("X(%s)" % r for r in rules))
    out.append("enum class SizesRule : uint8_t { None, %s };\n" % ", ".join(rules))
    out.append("inline constexpr const char* kSizesRuleNames[] = {\"None\", %s};\n\n" %
               ", ".join(c_string(r) for r in rules))
    out.append("""// One argument in schema order. tensor_index: its position among the Tensor and Tensor? arguments
// (op::<op>::tensor::), attr_index among the others (op::<op>::attr::); -1 where it has none (a
// Tensor[] is neither).
struct OpArg {
  const char* name;
  const char* type;           // as the schema writes it: "Tensor?", "int[2]", "Scalar"
  const char* default_value;  // as the schema writes it, nullptr when none
  int8_t tensor_index;
  int8_t attr_index;
  bool is_tensor;  // Tensor, Tensor? or Tensor[]
  bool is_list;    // Tensor[]
};

struct OpInfo {
  const char* name;        // "add.Tensor"
  const char* base;        // "add"
  const char* overload;    // "Tensor", "" for none
  const char* schema;
  const char* doc;         // one line
  const char* provider;    // "builtin", or the plugin whose kernels implement it
  const char* shape_rule;  // the dispatcher's meta_<shape_rule>: dtype, checks and sizes of concrete calls
  SizesRule sizes;         // the same sizes, on any size type
  uint32_t tags;           // Tag bits
  const OpArg* args;
  int num_args;
  int num_tensors;  // Tensor and Tensor? arguments
  int num_attrs;
  bool has(Tag t) const { return (tags & t) != 0; }
};

""")
    for name, args, entry in ops:
        rows = []
        ti = ai = 0
        for a in args:
            t = a_idx = -1
            if a.is_tensor and not a.is_list:
                t, ti = ti, ti + 1
            elif not a.is_tensor:
                a_idx, ai = ai, ai + 1
            rows.append("{%s, %s, %s, %d, %d, %s, %s}" % (
                c_string(a.name), c_string(a.typ), c_string(a.default) if a.default is not None else "nullptr",
                t, a_idx, "true" if a.is_tensor else "false", "true" if a.is_list else "false"))
        if rows:
            out.append("inline constexpr OpArg kArgs_%s[] = {\n    %s};\n" % (struct_name(name), ",\n    ".join(rows)))
    out.append("\ninline constexpr OpInfo kOpInfos[] = {\n")
    for name, args, entry in ops:
        base, _, overload = name.partition(".")
        tags = " | ".join("kTag%s" % camel(t) for t in entry["tags"]) or "0"
        ti = sum(1 for a in args if a.is_tensor and not a.is_list)
        ai = sum(1 for a in args if not a.is_tensor)
        out.append("    {%s, %s, %s, %s, %s, %s, %s, SizesRule::%s, %s, %s, %d, %d, %d},\n" % (
            c_string(name), c_string(base), c_string(overload), c_string(entry["schema"]), c_string(entry["doc"]),
            c_string(entry["provider"]), c_string(entry["shape_rule"]), entry.get("sizes", "None"), tags,
            "kArgs_%s" % struct_name(name) if args else "nullptr", len(args), ti, ai))
    out.append("};\ninline constexpr int kNumOpInfos = %d;\n\n" % len(ops))
    out.append("""// The OpInfo of `name`: a full name ("add.Tensor"), or a base name ("amax") that names the overload
// without a name or else the only overload. nullptr when the contract does not declare it.
inline const OpInfo* find_op_info(std::string_view name) {
  const OpInfo* only = nullptr;
  int count = 0;
  for (const OpInfo& info : kOpInfos) {
    if (name == info.name) return &info;
    if (name == info.base) {
      only = &info;
      ++count;
    }
  }
  return count == 1 ? only : nullptr;
}

// The tags of the op `name`; 0 for an op the contract does not declare.
inline uint32_t tags_of(std::string_view name) {
  const OpInfo* info = find_op_info(name);
  return info ? info->tags : 0;
}

}  // namespace tessera::op
""")
    return "".join(out)


def cpp_param(a):
    t = CPP_TYPES[(a.base, a.array)]
    if a.optional:  # by value, but for a tensor
        inner = t.replace("const ", "").replace("&", "")
        t = "const std::optional<%s>&" % inner if a.is_tensor else "std::optional<%s>" % inner
    return t


def cpp_default(a):
    d = a.default
    if d is None:
        return ""
    if d == "None":
        return " = std::nullopt"
    if d in ("True", "False"):
        return " = " + d.lower()
    if a.base == "int" and a.array:
        if d == "[]":
            return " = {}"
        items = d.strip("[]").split(",")
        return " = {%s}" % ", ".join(i.strip() for i in items)
    if a.base == "str":
        return " = " + d
    if re.match(r"^-?[0-9.e+-]+$", d):
        return " = " + d
    fail("cannot write default '%s' of argument '%s' in C++" % (d, a.name))


def api_ops(ops):
    return [(n, a, e) for (n, a, e) in ops if e["api"] == "generated"]


def gen_api_decls(tag_names, ops):
    out = [HEADER,
           "// The public functions of the plain ops of dispatcher/ops/ops.json (\"api\": \"generated\"): each\n"
           "// boxes its arguments and calls the op. Included by tessera/ops.h; documented by ops.json's doc line.\n",
           "#pragma once\n\nnamespace tessera {\n\n"]
    for name, args, entry in api_ops(ops):
        base = name.partition(".")[0]
        params = ", ".join("%s %s%s" % (cpp_param(a), a.name, cpp_default(a)) for a in args)
        out.append("// %s\nTESSERA_API Tensor %s(%s);\n" % (entry["doc"], base, params))
    out.append("\n}  // namespace tessera\n")
    return "".join(out)


def value_expr(a):
    conv = {"Scalar": "value_scalar", "int": "value_int", "float": "value_double", "bool": "value_bool",
            "ScalarType": "value_dtype"}
    if a.base == "int" and a.array:
        f = "value_ints"
    elif a.base == "str":
        return "value_string(%s.c_str())" % a.name
    else:
        f = conv[a.base]
    if a.optional:
        return "%s ? %s(*%s) : value_none()" % (a.name, f, a.name)
    return "%s(%s)" % (f, a.name)


def gen_api_defs(tag_names, ops):
    out = [HEADER, "// Definitions of tessera/ops_generated.h, included by dispatcher/src/ops.cpp.\n\n"]
    for name, args, entry in api_ops(ops):
        base = name.partition(".")[0]
        params = ", ".join("%s %s" % (cpp_param(a), a.name) for a in args)
        tensors = []
        for a in args:
            if a.is_tensor:
                tensors.append("opt_impl(%s)" % a.name if a.optional else
                               "impl_of(%s, %s, %s)" % (a.name, c_string(base), c_string(a.name)))
        attrs = [value_expr(a) for a in args if not a.is_tensor]
        out.append("Tensor %s(%s) {\n  TESSERA_OP(op, %s);\n  return call1(op, {%s}, {%s});\n}\n" % (
            base, params, c_string(name), ", ".join(tensors), ", ".join(attrs)))
    return "".join(out)


def gen_names(tag_names, ops):
    out = [HEADER,
           "// The op contract for kernels (Note [Op contract] in docs/plugin-guide.md): one struct per\n"
           "// operator with its registration name and the positions of its arguments as a kernel sees them,\n"
           "//   host.register_kernel(tessera::op::add_Tensor::name, ...);\n"
           "//   call.attr_double(tessera::op::add_Tensor::attr::alpha);\n"
           "// input:: counts the Tensor and Tensor? arguments in schema order (a Tensor[] comes as the list),\n"
           "// attr:: the other arguments in schema order. A misspelt op or argument does not compile.\n",
           "#pragma once\n\n",
           "namespace tessera::op {\n\n",
           "inline constexpr int kNumOps = %d;\n\n" % len(ops)]
    for name, args, entry in ops:
        inputs = [a for (_, a, t, lst) in args if t and not lst]
        attrs = [a for (_, a, t, _) in args if not t]
        out.append("// %s\n// %s\n" % (entry["schema"], entry["doc"]))
        out.append("struct %s {\n" % struct_name(name))
        out.append("  static constexpr const char name[] = %s;\n" % c_string(name))
        for scope, names in (("tensor", inputs), ("attr", attrs)):
            if scope in names:
                fail("%s: an argument may not be called '%s' (it names the index scope)" % (name, scope))
            body = ", ".join("%s = %d" % (a, i) for i, a in enumerate(names))
            out.append("  struct %s {\n    enum : int { %s };\n  };\n" % (scope, body) if body else
                       "  struct %s {};\n" % scope)
        out.append("};\n\n")
    out.append("}  // namespace tessera::op\n")
    return "".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ops_json")
    p.add_argument("--catalogue")
    p.add_argument("--names")
    p.add_argument("--info")
    p.add_argument("--api-decls")
    p.add_argument("--api-defs")
    a = p.parse_args()
    tags, ops = load(a.ops_json)
    for path, gen in ((a.catalogue, gen_catalogue), (a.names, gen_names), (a.info, gen_info),
                      (a.api_decls, gen_api_decls), (a.api_defs, gen_api_defs)):
        if path:
            write_text(path, gen(tags, ops))


if __name__ == "__main__":
    main()
