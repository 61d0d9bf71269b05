// Boxed calls of contract ops from Python (tessera._C.op), and the factories of ops.h.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "bindings.h"
#include "tessera/dispatcher.h"

namespace tessera::python {

namespace {

using Gil = nb::gil_scoped_release;

// An operator of the catalogue, callable with its arguments in schema order (Note [Python op
// functions]: the generated functions of tessera/_ops.py bind keywords and defaults, then call this).
class PyOp {
 public:
  // typed: take the typed fast path when the op has one (Note [Typed fast path]); false measures
  // or tests the boxed call alone.
  PyOp(const std::string& name, bool typed) : op_(&Dispatcher::instance().op(name)) {
    schema_ = &Dispatcher::instance().schema(*op_);
    if (typed) typed_ = typed_fast_path(schema_->full_name());
  }
  std::string name() const { return schema_->full_name(); }
  std::string schema() const { return schema_->str(); }
  bool typed() const { return typed_ != nullptr; }

  // Converts each argument to the boxed value of its schema type, then calls with the GIL released.
  nb::object call(const nb::args& args) const {
    nb::object fast;
    if (typed_ && typed_(args, fast)) return fast;
    const auto& params = schema_->arguments;
    if (args.size() > params.size())
      throw nb::type_error((name() + "() takes at most " + std::to_string(params.size()) + " arguments (" +
                            std::to_string(args.size()) + " given); schema: " + schema())
                               .c_str());
    Stack stack;
    stack.reserve(args.size());
    for (size_t i = 0; i < args.size(); ++i) stack.push_back(convert(args[i], params[i], i));
    Stack out;
    {
      Gil gil;
      out = Dispatcher::instance().call_boxed(*op_, std::move(stack));
    }
    if (out.size() == 1) return nb::cast(std::get<Tensor>(out[0]));
    nb::list l;
    for (Value& v : out) l.append(nb::cast(std::get<Tensor>(v)));
    return nb::tuple(l);
  }

  // True when every argument already has its schema type without conversion (a Tensor where a
  // Tensor is expected, a number where a Scalar is): how an overload is picked.
  bool accepts(const nb::args& args) const {
    const auto& params = schema_->arguments;
    if (args.size() > params.size()) return false;
    for (size_t i = 0; i < args.size(); ++i) {
      nb::handle h = args[i];
      Scalar s;
      switch (params[i].type) {
        case ArgType::Tensor:
          if (!nb::isinstance<Tensor>(h)) return false;
          break;
        case ArgType::OptionalTensor:
          if (!h.is_none() && !nb::isinstance<Tensor>(h)) return false;
          break;
        case ArgType::Scalar:
        case ArgType::OptionalScalar:
          if (h.is_none() && params[i].type == ArgType::OptionalScalar) break;
          if (nb::isinstance<Tensor>(h) || !scalar_arg(h, s)) return false;
          break;
        default:
          break;
      }
    }
    return true;
  }

 private:
  [[noreturn]] void bad(nb::handle h, const Argument& a, size_t i, const char* expected) const {
    throw nb::type_error((name() + "(): argument '" + a.name + "' (position " + std::to_string(i + 1) + ") must be " +
                          expected + ", not " + nb::cast<std::string>(nb::str(h.type().attr("__name__"))))
                             .c_str());
  }

  Value convert(nb::handle h, const Argument& a, size_t i) const {
    Scalar s;
    if (h.is_none()) return std::monostate{};  // the default, or None for an optional type
    switch (a.type) {
      case ArgType::Tensor:
      case ArgType::OptionalTensor:
        if (nb::isinstance<Tensor>(h)) return nb::cast<Tensor>(h);
        if (scalar_arg(h, s)) return wrapped_number(s);
        bad(h, a, i, "a Tensor or a number");
      case ArgType::TensorList: {
        if (!PySequence_Check(h.ptr()) || nb::isinstance<Tensor>(h)) bad(h, a, i, "a sequence of Tensors");
        std::vector<Tensor> l;
        for (nb::handle item : nb::iter(h)) {
          if (!nb::isinstance<Tensor>(item)) bad(item, a, i, "a sequence of Tensors");
          l.push_back(nb::cast<Tensor>(item));
        }
        return l;
      }
      case ArgType::Int:
      case ArgType::OptionalInt:
        if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr())) bad(h, a, i, "an int");
        return nb::cast<int64_t>(nb::int_(h));
      case ArgType::Float:
      case ArgType::OptionalFloat:
        if (!scalar_arg(h, s) || s.is_bool()) bad(h, a, i, "a float");
        return s.to_double();
      case ArgType::Bool:
        if (!scalar_arg(h, s) || !s.is_bool()) bad(h, a, i, "a bool");
        return s.to_bool();
      case ArgType::Scalar:
      case ArgType::OptionalScalar:
        if (nb::isinstance<Tensor>(h) || !scalar_arg(h, s)) bad(h, a, i, "a number (bool, int or float)");
        if (s.is_bool()) return s.to_bool();
        if (s.is_integral()) return s.to_int();
        return s.to_double();
      case ArgType::IntList:
      case ArgType::OptionalIntList:
        return int_list_arg(h, (name() + "(): argument '" + a.name + "'").c_str());
      case ArgType::String:
      case ArgType::OptionalString:
        if (!PyUnicode_Check(h.ptr())) bad(h, a, i, "a str");
        return nb::cast<std::string>(h);
      case ArgType::DType:
      case ArgType::OptionalDType:
        return dtype_arg(h);
    }
    bad(h, a, i, "a value of the schema's type");
  }

  OperatorEntry* op_;
  const FunctionSchema* schema_;
  TypedFastPath typed_ = nullptr;
};

TensorOptions options(nb::handle dtype, nb::handle device) {
  TensorOptions o;
  if (!dtype.is_none()) o = o.dtype(dtype_arg(dtype));
  if (!device.is_none()) o = o.device(device_arg(device));
  return o;
}

Scalar scalar_or_throw(nb::handle h, const char* what) {
  Scalar s;
  if (nb::isinstance<Tensor>(h) || !scalar_arg(h, s))
    throw nb::type_error((std::string(what) + ": expected a number (bool, int or float)").c_str());
  return s;
}

}  // namespace

void bind_op_call(nb::module_& m) {
  nb::class_<PyOp>(m, "op", "An operator of the catalogue by name (\"add.Tensor\"); call it with its "
                            "arguments in schema order (None: the default).")
      .def(nb::init<const std::string&, bool>(), nb::arg("name"), nb::arg("typed") = true)
      .def_prop_ro("name", &PyOp::name)
      .def_prop_ro("typed", &PyOp::typed, "True when calls take the typed fast path of ops.h "
                                          "(Note [Typed fast path]); otherwise the boxed call.")
      .def_prop_ro("schema", &PyOp::schema)
      .def("accepts", &PyOp::accepts)
      .def("__call__", &PyOp::call)
      .def("__repr__", [](const PyOp& o) { return "<tessera op " + o.schema() + ">"; });
  m.def("op_names", [] { return Dispatcher::instance().op_names(); },
        "Every operator of the catalogue (the contract's and those plugins defined).");
  m.def("op_doc", [](const std::string& name) {
    auto& d = Dispatcher::instance();
    return d.doc(d.op(name));
  });

  // ---- factories (ops.h): shape as f(2, 3) or f((2, 3))
#define TESSERA_PY_FACTORY(NAME)                                                          \
  m.def(#NAME, [](nb::args shape, nb::handle dtype, nb::handle device) {                  \
    auto s = shape_args(shape, #NAME);                                                    \
    TensorOptions o = options(dtype, device);                                             \
    Gil gil;                                                                              \
    return NAME(s, o);                                                                    \
  }, nb::arg("size"), nb::kw_only(), nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none())
  TESSERA_PY_FACTORY(empty);
  TESSERA_PY_FACTORY(zeros);
  TESSERA_PY_FACTORY(ones);
  TESSERA_PY_FACTORY(rand);
  TESSERA_PY_FACTORY(randn);
#undef TESSERA_PY_FACTORY
  m.def("full", [](nb::handle size, nb::handle value, nb::handle dtype, nb::handle device) {
    auto s = int_list_arg(size, "full");
    Scalar v = scalar_or_throw(value, "full: fill_value");
    TensorOptions o = options(dtype, device);
    Gil gil;
    return full(s, v, o);
  }, nb::arg("size"), nb::arg("fill_value"), nb::kw_only(), nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none());
  m.def("arange", [](nb::handle a, nb::handle b, nb::handle step, nb::handle dtype, nb::handle device) {
    TensorOptions o = options(dtype, device);
    Scalar st = step.is_none() ? Scalar(int64_t(1)) : scalar_or_throw(step, "arange: step");
    if (b.is_none()) {
      Scalar end = scalar_or_throw(a, "arange: end");
      Gil gil;
      return arange(Scalar(int64_t(0)), end, st, o);
    }
    Scalar start = scalar_or_throw(a, "arange: start"), end = scalar_or_throw(b, "arange: end");
    Gil gil;
    return arange(start, end, st, o);
  }, nb::arg("start"), nb::arg("end") = nb::none(), nb::arg("step") = nb::none(), nb::kw_only(),
     nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none());
  m.def("zeros_like", [](const Tensor& t) { Gil gil; return zeros_like(t); });
  m.def("ones_like", [](const Tensor& t) { Gil gil; return ones_like(t); });
  m.def("empty_like", [](const Tensor& t) { Gil gil; return empty_like(t); });
  m.def("manual_seed", [](uint64_t seed) { manual_seed(seed); }, nb::arg("seed"));
  m.def("allclose", [](const Tensor& a, const Tensor& b, double rtol, double atol) {
    Gil gil;
    return allclose(a, b, rtol, atol);
  }, nb::arg("a"), nb::arg("b"), nb::arg("rtol") = 1e-5, nb::arg("atol") = 1e-8);
  m.def("equal", [](const Tensor& a, const Tensor& b) { Gil gil; return equal(a, b); });
  m.def("_copy_into", [](Tensor& dst, const Tensor& src) { Gil gil; dst.copy_(src); });
  m.def("_fill", [](Tensor& dst, nb::handle v) {
    Scalar s = scalar_or_throw(v, "fill_");
    Gil gil;
    dst.fill_(s);
  });
}

}  // namespace tessera::python
