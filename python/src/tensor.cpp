// tessera.Tensor: metadata, operators with Python numbers as wrapped scalars, views, indexing.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "bindings.h"

namespace tessera::python {

namespace {

using Gil = nb::gil_scoped_release;

std::string py_type_name(nb::handle h) { return nb::cast<std::string>(nb::str(h.type().attr("__name__"))); }

// The other operand of a binary operator: a Tensor, or a number wrapped as a scalar tensor. False
// for anything else, so that the operator returns NotImplemented (and Python raises TypeError or
// tries the reflected operator of the other type).
bool operand(nb::handle h, Tensor& out) {
  if (nb::isinstance<Tensor>(h)) {
    out = nb::cast<Tensor>(h);
    return true;
  }
  Scalar s;
  if (!scalar_arg(h, s)) return false;
  out = wrapped_number(s);
  return true;
}

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

// self OP other (reflected: other OP self).
template <BinaryFn Fn, bool Reflected>
nb::object binary(const Tensor& self, nb::handle other) {
  Tensor o;
  if (!operand(other, o)) return nb::borrow(Py_NotImplemented);
  Tensor r;
  {
    Gil gil;
    r = Reflected ? Fn(o, self) : Fn(self, o);
  }
  return nb::cast(std::move(r));
}

Tensor add_fn(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor sub_fn(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor pow_fn(const Tensor& a, const Tensor& b) { return pow(a, b); }

// In-place operators: a += b writes into a (and its views), as in PyTorch. The ops without an
// in-place form in the contract (sub, div) compute, then copy into a.
using InPlaceFn = void (*)(Tensor&, const Tensor&);
void add_into(Tensor& a, const Tensor& b) { a.add_(b); }
void mul_into(Tensor& a, const Tensor& b) { a.mul_(b); }
void sub_into(Tensor& a, const Tensor& b) { a.copy_(sub(a, b)); }
void div_into(Tensor& a, const Tensor& b) { a.copy_(div(a, b)); }

template <InPlaceFn Fn>
nb::object inplace(nb::handle self_h, nb::handle other) {
  Tensor& self = nb::cast<Tensor&>(self_h);
  Tensor o;
  if (!operand(other, o)) return nb::borrow(Py_NotImplemented);
  {
    Gil gil;
    Fn(self, o);
  }
  return nb::borrow(self_h);
}

int64_t checked_index(nb::handle h, int64_t size, int64_t dim) {
  int64_t i = nb::cast<int64_t>(nb::int_(h));
  if (i < -size || i >= size)
    throw nb::index_error(("index " + std::to_string(i) + " is out of bounds for dimension " + std::to_string(dim) +
                           " with size " + std::to_string(size))
                              .c_str());
  return i < 0 ? i + size : i;
}

// Note [Python indexing]
// Basic indexing gives views, as in NumPy and PyTorch: an int selects (drops the dim), a slice
// (any positive step) narrows with a stride, None inserts a dim of size 1, Ellipsis stands for the
// dims not named. Negative and zero steps are refused with PyTorch's message ("step must be greater
// than zero"). One integer tensor (1-D, int32/int64) gathers along its dim through index_select and
// so copies, as advanced indexing does; so does one boolean mask (Note [Boolean masks]). Several
// tensor indices are not yet supported and say so.
// Note [Boolean masks]
// t[mask], as in PyTorch and NumPy: a bool mask of k >= 1 dims covers the k dims of `t` it starts at,
// whose sizes it must match (IndexError naming the first that differs); the result holds, in row-major
// order, the elements (or sub-tensors) where the mask is true, in one dim replacing the k: a copy.
// The mask is read on the CPU (copied there from another device), the positions of its true
// elements gathered through index_select on the k dims flattened.
Tensor mask_select(const Tensor& r, int64_t dim, const Tensor& mask, int64_t src_dim) {
  const int64_t k = mask.dim();
  if (k == 0) throw nb::index_error("a 0-dim boolean mask as an index is not supported yet; use a 1-D mask");
  if (dim + k > r.dim())
    throw nb::index_error("too many indices for the tensor: the mask has more dims than remain");
  for (int64_t i = 0; i < k; ++i) {
    if (mask.size(i) == r.size(dim + i)) continue;
    std::string mask_shape, shape;  // PyTorch's message: "[3] ... [3, 2]"
    for (int64_t s : mask.sizes()) mask_shape += (mask_shape.empty() ? "" : ", ") + std::to_string(s);
    for (int64_t s : r.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(s);
    throw nb::index_error(("The shape of the mask [" + mask_shape + "] at index " + std::to_string(i) +
                           " does not match the shape of the indexed tensor [" + shape + "] at index " +
                           std::to_string(src_dim + i))
                              .c_str());
  }
  Gil gil;
  Tensor m = mask.cpu().contiguous();
  const bool* bits = m.const_data_ptr<bool>();
  std::vector<int64_t> positions;
  for (int64_t i = 0, n = m.numel(); i < n; ++i)
    if (bits[i]) positions.push_back(i);
  std::vector<int64_t> sizes(r.sizes().begin(), r.sizes().begin() + dim);
  sizes.push_back(m.numel());
  sizes.insert(sizes.end(), r.sizes().begin() + dim + k, r.sizes().end());
  Tensor where = tensor<int64_t>(positions, {int64_t(positions.size())}, TensorOptions().device(r.device()));
  return index_select(r.reshape(sizes), dim, where);
}

Tensor index(const Tensor& self, nb::handle idx) {
  std::vector<nb::handle> items;
  nb::object keep;  // owns the tuple while `items` borrows from it
  if (PyTuple_Check(idx.ptr())) {
    keep = nb::borrow(idx);
    for (nb::handle h : nb::iter(idx)) items.push_back(h);
  } else {
    items.push_back(idx);
  }
  int64_t consumed = 0, ellipses = 0;
  for (nb::handle h : items) {
    if (h.is_none()) continue;
    if (h.ptr() == Py_Ellipsis) {
      ++ellipses;
      continue;
    }
    if (nb::isinstance<Tensor>(h)) {
      const Tensor& t = nb::cast<const Tensor&>(h);
      if (t.dtype() == kBool) {  // a mask covers as many dims as it has
        consumed += t.dim();
        continue;
      }
    }
    ++consumed;
  }
  if (ellipses > 1) throw nb::index_error("an index can only have a single ellipsis ('...')");
  int64_t ndim = self.dim();
  if (consumed > ndim)
    throw nb::index_error(("too many indices for tensor of dimension " + std::to_string(ndim) + " (got " +
                           std::to_string(consumed) + ")")
                              .c_str());
  Tensor r = self;
  int64_t dim = 0;      // the dim of `r` the next index applies to
  int64_t src_dim = 0;  // the same dim of `self` (for messages)
  bool gathered = false;
  for (nb::handle h : items) {
    if (h.is_none()) {
      r = r.unsqueeze(dim++);
    } else if (h.ptr() == Py_Ellipsis) {
      dim += ndim - consumed;
      src_dim += ndim - consumed;
    } else if (PySlice_Check(h.ptr())) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(h.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
      if (step <= 0) throw nb::value_error("step must be greater than zero");  // PyTorch's words
      int64_t size = r.size(dim);
      Py_ssize_t len = PySlice_AdjustIndices(Py_ssize_t(size), &start, &stop, step);
      std::vector<int64_t> sizes(r.sizes().begin(), r.sizes().end());
      std::vector<int64_t> strides(r.strides().begin(), r.strides().end());
      int64_t offset = r.storage_offset() + (len > 0 ? int64_t(start) * strides[dim] : 0);
      sizes[dim] = len;
      strides[dim] *= step;
      r = r.as_strided(sizes, strides, offset);
      ++dim;
      ++src_dim;
    } else if (nb::isinstance<Tensor>(h)) {
      Tensor t = nb::cast<Tensor>(h);
      if (gathered) throw nb::index_error("only one tensor index per indexing expression is supported yet");
      if (t.dtype() == kBool) {
        gathered = true;
        r = mask_select(r, dim++, t, src_dim);
        src_dim += t.dim();
        continue;
      }
      if (!is_integral(t.dtype()) || t.dim() != 1)
        throw nb::index_error("a tensor index must be a 1-D integer tensor");
      gathered = true;
      ++src_dim;
      Gil gil;
      r = index_select(r, dim++, t);
    } else if (PyIndex_Check(h.ptr()) && !PyBool_Check(h.ptr())) {
      r = r.select(dim, checked_index(h, r.size(dim), src_dim++));
    } else {
      throw nb::type_error(("only integers, slices (':'), None, Ellipsis ('...') and 1-D integer tensors are valid "
                            "indices, not " + py_type_name(h))
                               .c_str());
    }
  }
  return r;
}

void set_index(Tensor& self, nb::handle idx, nb::handle value) {
  if (PyTuple_Check(idx.ptr())) {
    for (nb::handle h : nb::iter(idx))
      if (nb::isinstance<Tensor>(h)) throw nb::index_error("assignment through a tensor index is not supported yet");
  } else if (nb::isinstance<Tensor>(idx)) {
    throw nb::index_error("assignment through a tensor index is not supported yet");
  }
  Tensor view = index(self, idx);
  Scalar s;
  if (nb::isinstance<Tensor>(value)) {
    Tensor v = nb::cast<Tensor>(value);
    Gil gil;
    view.copy_(v);
  } else if (scalar_arg(value, s)) {
    Gil gil;
    view.fill_(s);
  } else {  // an array or a nested list: shared or converted, then copied in (broadcasting, dtype)
    Tensor v = array_like_arg(value);
    Gil gil;
    view.copy_(v);
  }
}

nb::tuple int_tuple(IntArrayRef v) {
  nb::list l;
  for (int64_t x : v) l.append(x);
  return nb::tuple(l);
}

nb::object item_object(const Tensor& t) {
  TESSERA_CHECK(t.numel() == 1, "item(): the tensor has ", t.numel(), " elements; only a one-element tensor converts to a "
                "Python number");
  Scalar s;
  {
    Gil gil;
    s = t.item();
  }
  if (s.is_bool()) return nb::bool_(s.to_bool());
  if (s.is_integral()) return nb::int_(s.to_int());
  return nb::float_(s.to_double());
}

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor> cls(m, "Tensor", "A tensor on any Tessera device (docs/python.md).");
  cls.attr("__array_priority__") = 1000;  // numpy_array + tensor calls Tensor.__radd__
  cls.def_prop_ro("shape", [](const Tensor& t) { return int_tuple(t.sizes()); })
      .def("size", [](const Tensor& t, std::optional<int64_t> dim) -> nb::object {
        if (dim) return nb::int_(t.size(*dim));
        return int_tuple(t.sizes());
      }, nb::arg("dim") = nb::none())
      .def("stride", [](const Tensor& t, std::optional<int64_t> dim) -> nb::object {
        if (dim) return nb::int_(t.stride(*dim));
        return int_tuple(t.strides());
      }, nb::arg("dim") = nb::none())
      .def_prop_ro("dtype", [](const Tensor& t) { return dtype_object(t.dtype()); })
      .def_prop_ro("device", [](const Tensor& t) { return t.device(); })
      .def_prop_ro("ndim", [](const Tensor& t) { return t.dim(); })
      .def("dim", [](const Tensor& t) { return t.dim(); })
      .def("numel", [](const Tensor& t) { return t.numel(); })
      .def("element_size", [](const Tensor& t) { return t.itemsize(); })
      .def_prop_ro("itemsize", [](const Tensor& t) { return t.itemsize(); })
      .def_prop_ro("nbytes", [](const Tensor& t) { return t.nbytes(); })
      .def("storage_offset", [](const Tensor& t) { return t.storage_offset(); })
      .def("is_contiguous", [](const Tensor& t) { return t.is_contiguous(); })
      .def_prop_ro("is_cpu", [](const Tensor& t) { return t.is_cpu(); })
      .def("_is_device", [](const Tensor& t, const std::string& name) { return t.is(name); })
      .def("data_ptr", [](const Tensor& t) {
        // The address of element (0, ...): the storage's handle plus the offset, on any device (an
        // opaque handle plus a byte offset there, Note [Device memory] in docs/plugins.md).
        return uintptr_t(t.storage()->data()) + uintptr_t(t.storage_offset()) * t.itemsize();
      }, "The address of the first element (for a device other than the CPU: its memory handle plus the byte offset).")
      .def("_storage_id", [](const Tensor& t) { return uintptr_t(t.storage().get()); })
      .def("_storage_version", [](const Tensor& t) { return t.storage()->version(); })
      .def("item", &item_object)
      .def("__repr__", [](const Tensor& t) {
        Gil gil;
        return to_string(t);
      })
      .def("__len__", [](const Tensor& t) {
        if (t.dim() == 0) throw nb::type_error("len() of a 0-d tensor");
        return t.size(0);
      })
      .def("__bool__", [](const Tensor& t) {
        if (t.numel() != 1)
          throw nb::value_error(("the truth value of a tensor with " + std::to_string(t.numel()) +
                                 " elements is ambiguous; use .any() or .all() style reductions").c_str());
        return nb::cast<bool>(nb::bool_(item_object(t)));
      })
      .def("__float__", [](const Tensor& t) { return nb::float_(item_object(t)); })
      .def("__int__", [](const Tensor& t) { return nb::int_(item_object(t)); })
      .def("__index__", [](const Tensor& t) {
        if (!is_integral(t.dtype(), true) || t.numel() != 1)
          throw nb::type_error("only one-element integer tensors can be converted to an index");
        return nb::int_(item_object(t));
      })
      .def("__hash__", [](const Tensor& t) { return uintptr_t(t.impl()); })
      // ---- operators (Python numbers become wrapped scalars: PyTorch's promotion)
      .def("__add__", &binary<add_fn, false>)
      .def("__radd__", &binary<add_fn, true>)
      .def("__sub__", &binary<sub_fn, false>)
      .def("__rsub__", &binary<sub_fn, true>)
      .def("__mul__", &binary<mul, false>)
      .def("__rmul__", &binary<mul, true>)
      .def("__truediv__", &binary<div, false>)
      .def("__rtruediv__", &binary<div, true>)
      .def("__pow__", [](const Tensor& self, nb::handle other) -> nb::object {
        Scalar s;
        if (!nb::isinstance<Tensor>(other) && scalar_arg(other, s)) {
          Tensor r;
          {
            Gil gil;
            r = pow(self, s);
          }
          return nb::cast(std::move(r));
        }
        return binary<pow_fn, false>(self, other);
      })
      .def("__rpow__", &binary<pow_fn, true>)
      .def("__matmul__", &binary<matmul, false>)
      .def("__rmatmul__", &binary<matmul, true>)
      .def("__eq__", &binary<eq, false>)
      .def("__ne__", &binary<ne, false>)
      .def("__lt__", &binary<lt, false>)
      .def("__le__", &binary<le, false>)
      .def("__gt__", &binary<gt, false>)
      .def("__ge__", &binary<ge, false>)
      .def("__and__", &binary<logical_and, false>)
      .def("__or__", &binary<logical_or, false>)
      .def("__iadd__", &inplace<add_into>)
      .def("__imul__", &inplace<mul_into>)
      .def("__isub__", &inplace<sub_into>)
      .def("__itruediv__", &inplace<div_into>)
      .def("__neg__", [](const Tensor& t) { Gil gil; return -t; })
      .def("__pos__", [](const Tensor& t) { return t; })
      .def("__abs__", [](const Tensor& t) { Gil gil; return abs(t); })
      .def("__getitem__", &index)
      .def("__setitem__", &set_index)
      // ---- views (metadata only) and copies
      .def("view", [](const Tensor& t, nb::args shape) { return t.view(shape_args(shape, "view")); })
      .def("reshape", [](const Tensor& t, nb::args shape) {
        auto s = shape_args(shape, "reshape");
        Gil gil;
        return t.reshape(s);
      })
      .def("permute", [](const Tensor& t, nb::args dims) { return t.permute(shape_args(dims, "permute")); })
      .def("expand", [](const Tensor& t, nb::args sizes) { return t.expand(shape_args(sizes, "expand")); })
      .def("transpose", &Tensor::transpose, nb::arg("dim0"), nb::arg("dim1"))
      .def("t", &Tensor::t)
      .def_prop_ro("T", [](const Tensor& t) {
        std::vector<int64_t> dims;
        for (int64_t i = t.dim() - 1; i >= 0; --i) dims.push_back(i);
        return t.permute(dims);
      })
      .def("squeeze", [](const Tensor& t, std::optional<int64_t> dim) { return dim ? t.squeeze(*dim) : t.squeeze(); },
           nb::arg("dim") = nb::none())
      .def("unsqueeze", &Tensor::unsqueeze, nb::arg("dim"))
      .def("flatten", [](const Tensor& t, int64_t s, int64_t e) { Gil gil; return t.flatten(s, e); },
           nb::arg("start_dim") = 0, nb::arg("end_dim") = -1)
      .def("narrow", &Tensor::narrow, nb::arg("dim"), nb::arg("start"), nb::arg("length"))
      .def("select", [](const Tensor& t, int64_t dim, nb::handle i) {
        return t.select(dim, checked_index(i, t.size(dim), dim));
      }, nb::arg("dim"), nb::arg("index"))
      .def("as_strided", [](const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                            std::optional<int64_t> offset) { return t.as_strided(sizes, strides, offset); },
           nb::arg("size"), nb::arg("stride"), nb::arg("storage_offset") = nb::none())
      .def("zero_", [](nb::handle self) {
        Tensor& t = nb::cast<Tensor&>(self);
        {
          Gil gil;
          t.zero_();
        }
        return nb::borrow(self);
      })
      .def("cpu", [](const Tensor& t) { Gil gil; return t.cpu(); })
      .def_prop_ro("__array_interface__", [](nb::handle self) {  // NumPy's protocol, CPU tensors only
        return nb::module_::import_("tessera._interop").attr("_array_interface")(self);
      })
      .def("_to", [](nb::handle self, std::optional<Device> device, nb::handle dtype, bool copy) -> nb::object {
        const Tensor& t = nb::cast<const Tensor&>(self);
        std::optional<DType> dt;
        if (!dtype.is_none()) dt = dtype_arg(dtype);
        Device d = device.value_or(t.device());
        DType target = dt.value_or(t.dtype());
        bool same_device = d.type() == t.device().type() &&
                           (!d.has_index() || !t.device().has_index() || d.index() == t.device().index());
        if (same_device && target == t.dtype() && !copy) return nb::borrow(self);  // itself, as in PyTorch
        Tensor r;
        {
          Gil gil;
          r = same_device && target == t.dtype() ? t.clone() : (device ? t.to(d, target) : t.to(target));
        }
        return nb::cast(std::move(r));
      }, nb::arg("device").none(), nb::arg("dtype").none(), nb::arg("copy") = false);
}

}  // namespace tessera::python
