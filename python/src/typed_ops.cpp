// Typed fast paths of the boxed op calls (Note [Typed fast path]).
#include <nanobind/stl/string.h>

#include <deque>
#include <string>
#include <string_view>

#include "tessera/dispatcher.h"

#include "bindings.h"

namespace tessera::python {

// Note [Typed fast path]
// tessera._C.op(name)(...) converts its arguments to a boxed Stack and calls
// Dispatcher::call_boxed, which costs about 0.45 µs more than the typed functions of ops.h that the
// operators use (the Stack of variants in and out, the argument checks). For the common ops of the
// contract whose ops.h function has the schema's arguments exactly, the call goes to that function
// instead when every argument already has its plain type (a Tensor or a Python number for a Tensor,
// a number for a Scalar, a tuple/list of ints for int[], a bool for bool). Anything else (None, a
// single int for int[], a wrong type) returns false and the boxed call runs, so its conversions and error
// messages stay the only ones. Both paths dispatch the same operator, so kernels, export capture and errors
// raised by the op are the same.
//
// The same ops are also bound straight as functions of the extension (_C._typed_<name>) and as
// Tensor methods (Tensor._typed_<name>), with the schema's argument names and defaults;
// tessera/_ops.py takes the function instead of its Python wrapper, and tessera/_tensor_methods.py
// the method as t.<name>(), which skips the wrapper and the op object's call (about 0.25 µs of a
// 0.5 µs call). When the typed path declines they make the boxed call through
// _C.op(name, typed=False), so its messages stay the only ones. _C._typed_names maps each bound
// name to the op's full name: _ops.py takes a binding only for an op of that one overload, so an
// overload added to the contract later keeps the generated function that picks among them.

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

// The argument names and defaults of each kind of entry (the schemas' of the ops below).
enum class Kind { Unary, Binary, BinaryAlpha, Reduce };

struct Entry {
  std::string_view name;
  TypedFastPath fn;
  Kind kind;
};

// Ops of the contract whose ops.h function takes exactly the schema's arguments.
constexpr Entry kTyped[] = {
    {"add.Tensor",
     &binary_alpha<+[](const Tensor& a, const Tensor& b, const Scalar& s) { return add(a, b, s); }>,
     Kind::BinaryAlpha},
    {"sub.Tensor",
     &binary_alpha<+[](const Tensor& a, const Tensor& b, const Scalar& s) { return sub(a, b, s); }>,
     Kind::BinaryAlpha},
    {"mul.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return mul(a, b); }>, Kind::Binary},
    {"div.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return div(a, b); }>, Kind::Binary},
    {"maximum", &binary<+[](const Tensor& a, const Tensor& b) { return maximum(a, b); }>, Kind::Binary},
    {"minimum", &binary<+[](const Tensor& a, const Tensor& b) { return minimum(a, b); }>, Kind::Binary},
    {"eq.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return eq(a, b); }>, Kind::Binary},
    {"ne.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return ne(a, b); }>, Kind::Binary},
    {"lt.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return lt(a, b); }>, Kind::Binary},
    {"le.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return le(a, b); }>, Kind::Binary},
    {"gt.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return gt(a, b); }>, Kind::Binary},
    {"ge.Tensor", &binary<+[](const Tensor& a, const Tensor& b) { return ge(a, b); }>, Kind::Binary},
    {"logical_and", &binary<+[](const Tensor& a, const Tensor& b) { return logical_and(a, b); }>,
     Kind::Binary},
    {"logical_or", &binary<+[](const Tensor& a, const Tensor& b) { return logical_or(a, b); }>, Kind::Binary},
    {"matmul", &binary<+[](const Tensor& a, const Tensor& b) { return matmul(a, b); }>, Kind::Binary},
    {"neg", &unary<+[](const Tensor& x) { return neg(x); }>, Kind::Unary},
    {"abs", &unary<+[](const Tensor& x) { return abs(x); }>, Kind::Unary},
    {"exp", &unary<+[](const Tensor& x) { return exp(x); }>, Kind::Unary},
    {"log", &unary<+[](const Tensor& x) { return log(x); }>, Kind::Unary},
    {"sqrt", &unary<+[](const Tensor& x) { return sqrt(x); }>, Kind::Unary},
    {"rsqrt", &unary<+[](const Tensor& x) { return rsqrt(x); }>, Kind::Unary},
    {"sin", &unary<+[](const Tensor& x) { return sin(x); }>, Kind::Unary},
    {"cos", &unary<+[](const Tensor& x) { return cos(x); }>, Kind::Unary},
    {"tanh", &unary<+[](const Tensor& x) { return tanh(x); }>, Kind::Unary},
    {"sigmoid", &unary<+[](const Tensor& x) { return sigmoid(x); }>, Kind::Unary},
    {"relu", &unary<+[](const Tensor& x) { return relu(x); }>, Kind::Unary},
    {"silu", &unary<+[](const Tensor& x) { return silu(x); }>, Kind::Unary},
    {"erf", &unary<+[](const Tensor& x) { return erf(x); }>, Kind::Unary},
    {"sum", &reduce<+[](const Tensor& x, IntArrayRef d, bool k) { return sum(x, d, k); }>, Kind::Reduce},
    {"mean", &reduce<+[](const Tensor& x, IntArrayRef d, bool k) { return mean(x, d, k); }>, Kind::Reduce},
};

// The boxed call of `full_name` (an _C.op object, created once and kept for the process).
nb::object boxed_call(std::string_view full_name, const nb::args& args) {
  static std::deque<std::pair<std::string, nb::handle>> ops;  // leaked: alive until exit
  nb::handle op;
  for (auto& [name, h] : ops)
    if (name == full_name) op = h;
  if (!op.is_valid()) {
    op = nb::module_::import_("tessera._C").attr("op")(std::string(full_name), false).release();
    ops.emplace_back(std::string(full_name), op);
  }
  return op(*args);
}

template <size_t I>
nb::object call_typed(nb::tuple t) {
  nb::args args = nb::steal<nb::args>(t.release());
  nb::object out;
  if (kTyped[I].fn(args, out)) return out;
  return boxed_call(kTyped[I].name, args);
}

template <size_t I>
void bind_one(nb::module_& m, nb::handle tensor_class, nb::dict& names) {
  auto& d = Dispatcher::instance();
  OperatorEntry* found = d.find_op(kTyped[I].name);
  if (!found) return;  // not in the catalogue (any more): the generated function stays
  OperatorEntry& op = *found;
  static std::deque<std::string> docs;  // nanobind keeps the pointer
  docs.push_back(d.doc(op) + "\n\nSchema: " + d.schema(op).str());
  const char* doc = docs.back().c_str();
  std::string base(kTyped[I].name.substr(0, kTyped[I].name.find('.')));
  std::string fn_name = "_typed_" + base;
  names[base.c_str()] = std::string(kTyped[I].name);
  nb::class_<Tensor> cls = nb::borrow<nb::class_<Tensor>>(tensor_class);
  using H = nb::handle;
  switch (kTyped[I].kind) {
    case Kind::Unary: {
      auto f = [](H self) { return call_typed<I>(nb::make_tuple(self)); };
      m.def(fn_name.c_str(), f, nb::arg("self"), doc);
      cls.def(fn_name.c_str(), f, doc);
      break;
    }
    case Kind::Binary: {
      auto f = [](H self, H other) { return call_typed<I>(nb::make_tuple(self, other)); };
      m.def(fn_name.c_str(), f, nb::arg("self"), nb::arg("other"), doc);
      cls.def(fn_name.c_str(), f, nb::arg("other"), doc);
      break;
    }
    case Kind::BinaryAlpha: {
      auto f = [](H self, H other, H alpha) { return call_typed<I>(nb::make_tuple(self, other, alpha)); };
      m.def(fn_name.c_str(), f, nb::arg("self"), nb::arg("other"), nb::kw_only(), nb::arg("alpha") = 1, doc);
      cls.def(fn_name.c_str(), f, nb::arg("other"), nb::kw_only(), nb::arg("alpha") = 1, doc);
      break;
    }
    case Kind::Reduce: {
      auto f = [](H self, H dim, H keepdim) { return call_typed<I>(nb::make_tuple(self, dim, keepdim)); };
      m.def(fn_name.c_str(), f, nb::arg("self"), nb::arg("dim") = nb::tuple(), nb::arg("keepdim") = false,
            doc);
      cls.def(fn_name.c_str(), f, nb::arg("dim") = nb::tuple(), nb::arg("keepdim") = false, doc);
      break;
    }
  }
}

template <size_t... I>
void bind_all(nb::module_& m, nb::handle tensor_class, std::index_sequence<I...>) {
  nb::dict names;
  (bind_one<I>(m, tensor_class, names), ...);
  m.attr("_typed_names") = names;
}

}  // namespace

void bind_typed_ops(nb::module_& m) {
  bind_all(m, m.attr("Tensor"), std::make_index_sequence<std::size(kTyped)>());
}

TypedFastPath typed_fast_path(std::string_view full_name) {
  for (const Entry& e : kTyped)
    if (e.name == full_name) return e.fn;
  return nullptr;
}

}  // namespace tessera::python
