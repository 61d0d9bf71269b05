// Typed fast paths of the boxed op calls (Note [Typed fast path]).
#include <nanobind/stl/string.h>

#include <string_view>

#include "bindings.h"

namespace tessera::python {

// Note [Typed fast path]
// tessera._C.op(name)(...) converts its arguments to a boxed Stack and calls
// Dispatcher::call_boxed, which costs about 0.45 µs more than the typed functions of ops.h that the
// operators use (the Stack of variants in and out, the argument checks). For the common ops of the
// contract whose ops.h function has the schema's arguments exactly, the call goes to that function
// instead when every argument already has its plain type (a Tensor or a Python number for a Tensor,
// a number for a Scalar, a tuple/list of ints for int[], a bool for bool). Anything else (None,
// keywords already bound by the Python wrapper to the same positions, a wrong type) returns false
// and the boxed call runs, so its conversions and error messages stay the only ones. Both paths
// dispatch the same operator, so kernels, export capture and errors raised by the op are the same.

namespace {

using Gil = nb::gil_scoped_release;

bool tensor_or_number(nb::handle h, Tensor& out) {
  if (nb::isinstance<Tensor>(h)) {
    out = nb::cast<Tensor>(h);
    return true;
  }
  Scalar s;
  if (h.is_none() || !scalar_arg(h, s)) return false;
  out = wrapped_number(s);
  return true;
}

bool plain_scalar(nb::handle h, Scalar& out) { return !nb::isinstance<Tensor>(h) && scalar_arg(h, out); }

template <typename F>
nb::object run(F&& f) {
  Tensor r;
  {
    Gil gil;
    r = f();
  }
  return nb::cast(std::move(r));
}

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);
using BinaryAlpha = Tensor (*)(const Tensor&, const Tensor&, const Scalar&);
using Reduce = Tensor (*)(const Tensor&, IntArrayRef, bool);

template <Unary Fn>
bool unary(const nb::args& args, nb::object& out) {
  Tensor a;
  if (args.size() != 1 || !tensor_or_number(args[0], a)) return false;
  out = run([&] { return Fn(a); });
  return true;
}

template <Binary Fn>
bool binary(const nb::args& args, nb::object& out) {
  Tensor a, b;
  if (args.size() != 2 || !tensor_or_number(args[0], a) || !tensor_or_number(args[1], b)) return false;
  out = run([&] { return Fn(a, b); });
  return true;
}

// (Tensor self, Tensor other, *, Scalar alpha=1)
template <BinaryAlpha Fn>
bool binary_alpha(const nb::args& args, nb::object& out) {
  Tensor a, b;
  Scalar alpha(int64_t(1));
  if (args.size() < 2 || args.size() > 3 || !tensor_or_number(args[0], a) || !tensor_or_number(args[1], b) ||
      (args.size() == 3 && !plain_scalar(args[2], alpha)))
    return false;
  out = run([&] { return Fn(a, b, alpha); });
  return true;
}

// (Tensor self, int[] dim=[], bool keepdim=False)
template <Reduce Fn>
bool reduce(const nb::args& args, nb::object& out) {
  Tensor a;
  if (args.size() < 1 || args.size() > 3 || !tensor_or_number(args[0], a)) return false;
  std::vector<int64_t> dims;
  if (args.size() >= 2) {
    nb::handle d = args[1];
    if (!PyTuple_Check(d.ptr()) && !PyList_Check(d.ptr())) return false;
    for (nb::handle item : nb::iter(d)) {
      if (!PyLong_Check(item.ptr()) || PyBool_Check(item.ptr())) return false;
      dims.push_back(nb::cast<int64_t>(item));
    }
  }
  bool keepdim = false;
  if (args.size() == 3) {
    if (!PyBool_Check(args[2].ptr())) return false;
    keepdim = args[2].ptr() == Py_True;
  }
  out = run([&] { return Fn(a, dims, keepdim); });
  return true;
}

struct Entry {
  std::string_view name;
  TypedFastPath fn;
};

// Ops of the contract whose ops.h function takes exactly the schema's arguments.
constexpr Entry kTyped[] = {
    {"add.Tensor", &binary_alpha<+[](const Tensor& a, const Tensor& b, const Scalar& s) { return add(a, b, s); }>},
    {"sub.Tensor", &binary_alpha<+[](const Tensor& a, const Tensor& b, const Scalar& s) { return sub(a, b, s); }>},
    {"mul.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return mul(a, b); }>},
    {"div.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return div(a, b); }>},
    {"maximum", &binary<+[](const Tensor& a, const Tensor& b) { return maximum(a, b); }>},
    {"minimum", &binary<+[](const Tensor& a, const Tensor& b) { return minimum(a, b); }>},
    {"eq.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return eq(a, b); }>},
    {"ne.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return ne(a, b); }>},
    {"lt.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return lt(a, b); }>},
    {"le.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return le(a, b); }>},
    {"gt.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return gt(a, b); }>},
    {"ge.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return ge(a, b); }>},
    {"logical_and", &binary<+[](const Tensor& a, const Tensor& b) { return logical_and(a, b); }>},
    {"logical_or", &binary<+[](const Tensor& a, const Tensor& b) { return logical_or(a, b); }>},
    {"matmul", &binary<+[](const Tensor& a, const Tensor& b) { return matmul(a, b); }>},
    {"neg", &unary<+[](const Tensor& x) { return neg(x); }>},
    {"abs", &unary<+[](const Tensor& x) { return abs(x); }>},
    {"exp", &unary<+[](const Tensor& x) { return exp(x); }>},
    {"log", &unary<+[](const Tensor& x) { return log(x); }>},
    {"sqrt", &unary<+[](const Tensor& x) { return sqrt(x); }>},
    {"rsqrt", &unary<+[](const Tensor& x) { return rsqrt(x); }>},
    {"sin", &unary<+[](const Tensor& x) { return sin(x); }>},
    {"cos", &unary<+[](const Tensor& x) { return cos(x); }>},
    {"tanh", &unary<+[](const Tensor& x) { return tanh(x); }>},
    {"sigmoid", &unary<+[](const Tensor& x) { return sigmoid(x); }>},
    {"relu", &unary<+[](const Tensor& x) { return relu(x); }>},
    {"silu", &unary<+[](const Tensor& x) { return silu(x); }>},
    {"erf", &unary<+[](const Tensor& x) { return erf(x); }>},
    {"sum", &reduce<+[](const Tensor& x, IntArrayRef d, bool k) { return sum(x, d, k); }>},
    {"mean", &reduce<+[](const Tensor& x, IntArrayRef d, bool k) { return mean(x, d, k); }>},
};

}  // namespace

TypedFastPath typed_fast_path(std::string_view full_name) {
  for (const Entry& e : kTyped)
    if (e.name == full_name) return e.fn;
  return nullptr;
}

}  // namespace tessera::python
