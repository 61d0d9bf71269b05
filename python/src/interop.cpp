// NumPy and DLPack without copies (docs/python.md, "NumPy and DLPack").
//
// Note [Zero-copy interop]
// In: an object that speaks DLPack or the buffer protocol (a NumPy array, a PyTorch CPU tensor)
// arrives as an nb::ndarray; the tensor's Storage wraps its memory with a DataPtr whose context is a
// heap copy of that nb::ndarray, so the producer stays alive as long as any tensor or view uses the
// memory; the deleter drops it with the GIL held. Only CPU memory is taken in this way (another
// device's pointer has no meaning to a Tessera plugin's allocator), and negative strides (which a
// Tessera geometry cannot express) are refused: the Python side copies only when copy=True.
// Out: numpy() is an nb::ndarray over the tensor's memory whose owner is a capsule holding a Tensor
// (so the storage lives as long as the array). __dlpack__ is the C++ tessera::to_dlpack for every
// device (tessera/dlpack.h): a renamed or third-party device (privateuse1..3) exports as kDLExtDev
// (device_id per Note [DLPack devices]); its data pointer is the plugin's memory handle and
// byte_offset the first element's offset. Exporting moves the storage's version (Note [Storage
// version]), as data_ptr() does; writes made later through memory shared with NumPy or another
// framework are not seen by the version, so something a kernel derived from the tensor (a
// prepacked weight) may be stale after them.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.h"
#include "tessera/dlpack.h"

namespace tessera::python {

namespace {

namespace dl = nb::dlpack;
constexpr int kDLCPU = dlpack::kDLCPU;

using AnyArray = nb::ndarray<nb::ro>;

DType dtype_from_dlpack(dl::dtype t) {
  if (t.lanes != 1) throw nb::type_error("DLPack: vector dtypes (lanes != 1) are not supported");
  switch (dl::dtype_code(t.code)) {
    case dl::dtype_code::Bool: if (t.bits == 8) return kBool; break;
    case dl::dtype_code::UInt: if (t.bits == 8) return kUInt8; break;
    case dl::dtype_code::Int:
      if (t.bits == 8) return kInt8;
      if (t.bits == 16) return kInt16;
      if (t.bits == 32) return kInt32;
      if (t.bits == 64) return kInt64;
      break;
    case dl::dtype_code::Float:
      if (t.bits == 16) return kFloat16;
      if (t.bits == 32) return kFloat32;
      if (t.bits == 64) return kFloat64;
      break;
    case dl::dtype_code::Bfloat: if (t.bits == 16) return kBFloat16; break;
    default: break;
  }
  throw nb::type_error(("the array's dtype (DLPack code " + std::to_string(int(t.code)) + ", " + std::to_string(int(t.bits)) +
                        " bits) has no Tessera dtype (supported: bool, uint8, int8..int64, float16, bfloat16, float32, "
                        "float64)")
                           .c_str());
}

dl::dtype dlpack_from_dtype(DType t) {
  switch (t) {
    case kBool: return {uint8_t(dl::dtype_code::Bool), 8, 1};
    case kUInt8: return {uint8_t(dl::dtype_code::UInt), 8, 1};
    case kInt8: return {uint8_t(dl::dtype_code::Int), 8, 1};
    case kInt16: return {uint8_t(dl::dtype_code::Int), 16, 1};
    case kInt32: return {uint8_t(dl::dtype_code::Int), 32, 1};
    case kInt64: return {uint8_t(dl::dtype_code::Int), 64, 1};
    case kFloat16: return {uint8_t(dl::dtype_code::Float), 16, 1};
    case kBFloat16: return {uint8_t(dl::dtype_code::Bfloat), 16, 1};
    case kFloat32: return {uint8_t(dl::dtype_code::Float), 32, 1};
    case kFloat64: return {uint8_t(dl::dtype_code::Float), 64, 1};
    default:
      throw nb::type_error(("a " + std::string(dtype_name(t)) +
                            " tensor cannot be shared: quantized tensors have no DLPack dtype (dequantize() or "
                            "int_repr() first)")
                               .c_str());
  }
}

// The one mapping of tessera/dlpack.h (Note [DLPack devices]): a renamed backend exports as
// kDLExtDev with device_id (slot - 1) * 65536 + index, the same in C++ and Python.
dlpack::DLDevice dlpack_device_of(Device d) {
  if (d.type() == DeviceType::Meta) throw nb::value_error("a tensor on the meta device has no memory to share");
  return to_dlpack_device(d);
}

void release_array(void* ctx, void*) {
  auto* a = static_cast<AnyArray*>(ctx);
  if (!Py_IsInitialized()) return;  // interpreter gone: the producer went with it
  nb::gil_scoped_acquire gil;
  delete a;
}

Tensor from_array(AnyArray a) {
  if (a.device_type() != kDLCPU)
    throw nb::value_error(("from_dlpack: only CPU memory is taken without a copy (the array is on DLPack device type " +
                           std::to_string(a.device_type()) + "); move it to the CPU first or pass copy=True")
                              .c_str());
  DType dt = dtype_from_dlpack(a.dtype());
  std::vector<int64_t> sizes(a.ndim()), strides(a.ndim());
  int64_t extent = 1;  // elements the geometry reaches
  bool empty = false;
  for (size_t i = 0; i < a.ndim(); ++i) {
    sizes[i] = int64_t(a.shape(i));
    strides[i] = a.stride(i);
    if (strides[i] < 0)
      throw nb::value_error("the array has negative strides, which a Tessera tensor cannot express without a copy; "
                            "pass copy=True (or numpy.ascontiguousarray(a))");
    if (sizes[i] == 0) empty = true;
    extent += (sizes[i] - 1) * strides[i];
  }
  size_t nbytes = empty ? 0 : size_t(extent) * itemsize(dt);
  auto* keep = new AnyArray(a);
  DataPtr data(const_cast<void*>(a.data()), keep, &release_array, Device(DeviceType::CPU));
  Storage storage = make_intrusive<StorageImpl>(std::move(data), nbytes);
  return Tensor(make_intrusive<TensorImpl>(std::move(storage), dt, Device(DeviceType::CPU), sizes, strides, 0));
}

nb::capsule owner_of(const Tensor& t) {
  return nb::capsule(new Tensor(t), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
}

// The tensor's memory as an ndarray of framework F, sharing it.
template <typename... F>
nb::ndarray<F...> as_ndarray(const Tensor& t) {
  TESSERA_CHECK(t.storage()->usable(), "the tensor's storage is unusable because ", t.storage()->unusable_reason());
  // Writable memory handed out, as data_ptr() does in C++ (Note [Storage version]).
  t.storage()->bump_version();
  const dlpack::DLDevice dev = dlpack_device_of(t.device());
  const int dev_type = dev.device_type;
  std::vector<size_t> shape(t.sizes().begin(), t.sizes().end());
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  void* base = t.storage()->data();
  uint64_t byte_offset = uint64_t(t.storage_offset()) * t.itemsize();
  if (dev_type == kDLCPU) {  // a pointer: fold the offset in (NumPy's import ignores byte_offset)
    base = static_cast<char*>(base) + byte_offset;
    byte_offset = 0;
  }
  return nb::ndarray<F...>(base, shape.size(), shape.data(), owner_of(t), strides.data(), dlpack_from_dtype(t.dtype()),
                           dev_type, dev.device_id, 0, byte_offset);
}

}  // namespace

Tensor array_like_arg(nb::handle h) {
  nb::object obj = nb::borrow(h);
  if (PySequence_Check(h.ptr()) && !nb::hasattr(h, "__dlpack__") && !PyUnicode_Check(h.ptr()))
    obj = nb::module_::import_("numpy").attr("ascontiguousarray")(h);
  AnyArray a;
  if (!nb::try_cast(obj, a))
    throw nb::type_error(("expected a Tensor, a number, an array (NumPy, DLPack) or a nested sequence of numbers, not " +
                          nb::cast<std::string>(nb::str(h.type().attr("__name__"))))
                             .c_str());
  return from_array(std::move(a));
}

void bind_interop(nb::module_& m) {
  m.def("_from_array", [](AnyArray a) { return from_array(std::move(a)); }, nb::arg("array"),
        "A CPU tensor sharing the memory of an object with __dlpack__ or the buffer protocol.");
  m.def("_to_numpy", [](const Tensor& t) {
    TESSERA_CHECK(t.is_cpu(), "numpy(): the tensor is on '", t.device().str(),
                  "'; NumPy only sees CPU memory: call .cpu() first, or numpy(copy=True)");
    return nb::cast(as_ndarray<nb::numpy>(t));
  }, nb::arg("tensor"));
  // Tensor.__dlpack__ is the C++ tessera::to_dlpack (one implementation for C++ and Python);
  // _from_dlpack_capsule is tessera::from_dlpack, for tests that check it against NumPy. Capsule
  // names follow the Python DLPack protocol: a consumer renames "dltensor[_versioned]" to
  // "used_..."; a capsule never consumed calls the deleter when it is collected.
  m.def("_to_dlpack", [](const Tensor& t, bool versioned, bool read_only) {
    if (versioned) {
      auto* mt = to_dlpack(t, {.read_only = read_only});
      return nb::steal<nb::object>(PyCapsule_New(mt, "dltensor_versioned", [](PyObject* cap) {
        if (!PyCapsule_IsValid(cap, "dltensor_versioned")) return;
        auto* m = static_cast<dlpack::DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
        if (m && m->deleter) m->deleter(m);
      }));
    }
    auto* mt = to_dlpack_unversioned(t);
    return nb::steal<nb::object>(PyCapsule_New(mt, "dltensor", [](PyObject* cap) {
      if (!PyCapsule_IsValid(cap, "dltensor")) return;
      auto* m = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m && m->deleter) m->deleter(m);
    }));
  }, nb::arg("tensor"), nb::arg("versioned") = true, nb::arg("read_only") = false);
  m.def("_from_dlpack_capsule", [](nb::handle cap) {
    PyObject* c = cap.ptr();
    if (PyCapsule_IsValid(c, "dltensor_versioned")) {
      auto* m = static_cast<dlpack::DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, "dltensor_versioned"));
      PyCapsule_SetName(c, "used_dltensor_versioned");  // ours now, whatever from_dlpack decides
      return from_dlpack(m);
    }
    if (PyCapsule_IsValid(c, "dltensor")) {
      auto* m = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
      PyCapsule_SetName(c, "used_dltensor");
      return from_dlpack(m);
    }
    throw nb::type_error("_from_dlpack_capsule: expected an unused DLPack capsule");
  }, nb::arg("capsule"));
  m.def("_dlpack_device", [](const Tensor& t) {
    const dlpack::DLDevice dev = dlpack_device_of(t.device());
    return nb::make_tuple(dev.device_type, dev.device_id);
  });
}

}  // namespace tessera::python
