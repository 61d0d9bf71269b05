// tessera::to_dlpack / from_dlpack (tessera/dlpack.h): capsules written by hand (the DLPack layout,
// field by field, as another framework would fill it) in, capsules read field by field out; the
// reference accelerator (privateuse1) and the second accelerator (privateuse2) for kDLExtDev.
#include <tessera/dlpack.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "accel_test_util.h"

namespace {
using namespace tessera;
using dlpack::DLManagedTensor, dlpack::DLManagedTensorVersioned;

// A producer's capsule over memory it owns, counting deleter calls.
struct HandMade {
  std::vector<int64_t> shape, strides;
  std::vector<unsigned char> bytes;
  int deleted = 0;
  DLManagedTensorVersioned m{};
  DLManagedTensor legacy{};

  HandMade(std::vector<int64_t> shape_, std::vector<int64_t> strides_, size_t nbytes, dlpack::DLDataType dtype)
      : shape(std::move(shape_)), strides(std::move(strides_)), bytes(nbytes) {
    dlpack::DLTensor t{};
    t.data = bytes.data();
    t.device = {dlpack::kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    m.version = {1, 0};
    m.manager_ctx = this;
    m.deleter = [](DLManagedTensorVersioned* self) { ++static_cast<HandMade*>(self->manager_ctx)->deleted; };
    m.dl_tensor = t;
    legacy.dl_tensor = t;
    legacy.manager_ctx = this;
    legacy.deleter = [](DLManagedTensor* self) { ++static_cast<HandMade*>(self->manager_ctx)->deleted; };
  }
  template <typename T>
  T* as() { return reinterpret_cast<T*>(bytes.data()); }
};

constexpr dlpack::DLDataType kF32{dlpack::kDLFloat, 32, 1};

TEST(DLPack, LayoutIsTheSpecs) {
  // Offsets of DLPack 1.x (dlpack.h): a capsule written by another framework reads the same.
  EXPECT_EQ(offsetof(dlpack::DLTensor, device), 8u);
  EXPECT_EQ(offsetof(dlpack::DLTensor, strides), 32u);
  EXPECT_EQ(offsetof(DLManagedTensorVersioned, manager_ctx), 8u);
  EXPECT_EQ(offsetof(DLManagedTensorVersioned, deleter), 16u);
  EXPECT_EQ(offsetof(DLManagedTensor, manager_ctx), 48u);
}

TEST(DLPack, ImportsAStridedViewWithoutACopyAndDeletesOnce) {
  // A 2x3 float32 view with column stride 2 (every other element of a 2x6 buffer), 1 element in.
  HandMade h({2, 3}, {6, 2}, 13 * sizeof(float), kF32);
  std::iota(h.as<float>(), h.as<float>() + 13, 0.0f);
  h.m.dl_tensor.byte_offset = sizeof(float);
  {
    Tensor t = from_dlpack(&h.m);
    EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{6, 2}));
    EXPECT_EQ(t.const_data_ptr<float>(), h.as<float>() + 1);  // the producer's memory itself
    EXPECT_EQ(accel_test::values(t), (std::vector<double>{1, 3, 5, 7, 9, 11}));
    Tensor view = t.select(0, 1);
    t = Tensor();
    EXPECT_EQ(h.deleted, 0) << "a view still uses the memory";
    h.as<float>()[9] = 42;  // zero-copy: the producer's writes are seen
    EXPECT_EQ(accel_test::values(view), (std::vector<double>{7, 42, 11}));
  }
  EXPECT_EQ(h.deleted, 1);
}

TEST(DLPack, LegacyCapsuleNullStridesZeroDimAndEmpty) {
  HandMade row({2, 2}, {}, 4 * sizeof(int64_t), {dlpack::kDLInt, 64, 1});  // strides NULL: row-major
  for (int i = 0; i < 4; ++i) row.as<int64_t>()[i] = 10 + i;
  {
    Tensor t = from_dlpack(&row.legacy);
    EXPECT_EQ(t.dtype(), kInt64);
    EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(t.const_data_ptr<int64_t>()[3], 13);
  }
  EXPECT_EQ(row.deleted, 1);

  HandMade scalar({}, {}, sizeof(double), {dlpack::kDLFloat, 64, 1});
  *scalar.as<double>() = 2.5;
  EXPECT_EQ(from_dlpack(&scalar.m).item<double>(), 2.5);
  EXPECT_EQ(scalar.deleted, 1);

  HandMade empty_t({3, 0}, {0, 1}, 0, kF32);
  empty_t.m.dl_tensor.data = nullptr;  // allowed: no element is read
  Tensor e = from_dlpack(&empty_t.m);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.sizes().vec(), (std::vector<int64_t>{3, 0}));
  e = Tensor();
  EXPECT_EQ(empty_t.deleted, 1);
}

TEST(DLPack, EveryDTypeBothWays) {
  const std::vector<std::pair<DType, dlpack::DLDataType>> table = {
      {kBool, {dlpack::kDLBool, 8, 1}},     {kUInt8, {dlpack::kDLUInt, 8, 1}},
      {kInt8, {dlpack::kDLInt, 8, 1}},      {kInt16, {dlpack::kDLInt, 16, 1}},
      {kInt32, {dlpack::kDLInt, 32, 1}},    {kInt64, {dlpack::kDLInt, 64, 1}},
      {kFloat16, {dlpack::kDLFloat, 16, 1}}, {kBFloat16, {dlpack::kDLBfloat, 16, 1}},
      {kFloat32, {dlpack::kDLFloat, 32, 1}}, {kFloat64, {dlpack::kDLFloat, 64, 1}}};
  for (const auto& [dt, dl] : table) {
    dlpack::DLDataType got = to_dlpack_dtype(dt);
    EXPECT_EQ(got.code, dl.code) << dtype_name(dt);
    EXPECT_EQ(got.bits, dl.bits) << dtype_name(dt);
    EXPECT_EQ(got.lanes, 1) << dtype_name(dt);
    EXPECT_EQ(dtype_from_dlpack(dl), dt);
    // Through a capsule: bytes written by hand come back bit for bit.
    Tensor t = ones({3}, TensorOptions().dtype(dt));
    DLManagedTensorVersioned* m = to_dlpack(t);
    EXPECT_EQ(m->dl_tensor.dtype.code, dl.code);
    Tensor back = from_dlpack(m);
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_EQ(std::memcmp(back.raw_const_data_ptr(), t.raw_const_data_ptr(), 3 * itemsize(dt)), 0);
  }
  EXPECT_THROW(to_dlpack_dtype(kQInt8), Error);
}

TEST(DLPack, ExportsFieldsAsTheSpecSays) {
  Tensor base = arange(24, TensorOptions().dtype(kFloat32)).view({2, 3, 4});
  Tensor v = base.transpose(0, 2).select(1, 1);  // sizes {4, 2}, strides {1, 12}, offset 4
  DLManagedTensorVersioned* m = to_dlpack(v, {.read_only = true});
  EXPECT_EQ(m->version.major, 1u);
  EXPECT_EQ(m->flags, dlpack::kFlagReadOnly);
  EXPECT_EQ(m->dl_tensor.device.device_type, dlpack::kDLCPU);
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(std::vector<int64_t>(m->dl_tensor.shape, m->dl_tensor.shape + 2), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(std::vector<int64_t>(m->dl_tensor.strides, m->dl_tensor.strides + 2), (std::vector<int64_t>{1, 12}));
  EXPECT_EQ(m->dl_tensor.byte_offset, 0u);  // CPU: folded into data
  const float* data = static_cast<const float*>(m->dl_tensor.data);
  EXPECT_EQ(data, base.const_data_ptr<float>() + 4);
  EXPECT_EQ(data[0 * 1 + 1 * 12], 16.0f);  // v[0][1] = base[1][1][0]
  base = Tensor();
  v = Tensor();
  EXPECT_EQ(data[3], 7.0f) << "the capsule keeps the storage alive";
  m->deleter(m);

  DLManagedTensor* legacy = to_dlpack_unversioned(arange(3, TensorOptions().dtype(kInt32)));
  EXPECT_EQ(static_cast<const int32_t*>(legacy->dl_tensor.data)[2], 2);
  legacy->deleter(legacy);
}

TEST(DLPack, ReadOnlyCapsuleIsCopiedAndReleasedAtOnce) {
  HandMade h({4}, {1}, 4 * sizeof(float), kF32);
  std::iota(h.as<float>(), h.as<float>() + 4, 1.0f);
  h.m.flags = dlpack::kFlagReadOnly;
  Tensor t = from_dlpack(&h.m);
  EXPECT_EQ(h.deleted, 1) << "copied: the producer's memory is released before from_dlpack returns";
  EXPECT_NE(t.const_data_ptr<float>(), h.as<float>());
  t.add_(ones({4}));
  EXPECT_EQ(h.as<float>()[0], 1.0f) << "an in-place write never reaches a read-only producer";
  EXPECT_EQ(accel_test::values(t), (std::vector<double>{2, 3, 4, 5}));

  HandMade w({2}, {1}, 2 * sizeof(float), kF32);
  Tensor c = from_dlpack(&w.m, {.copy = true});
  EXPECT_EQ(w.deleted, 1);
  EXPECT_NE(c.const_data_ptr<float>(), w.as<float>());
}

// Untrusted capsule contents: a clear error, and the deleter still called exactly once.
void expect_refused(HandMade& h, const std::string& fragment, bool versioned = true) {
  try {
    if (versioned)
      from_dlpack(&h.m);
    else
      from_dlpack(&h.legacy);
    ADD_FAILURE() << "accepted; expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  EXPECT_EQ(h.deleted, 1) << fragment;
}

TEST(DLPack, UntrustedCapsulesGetClearErrors) {
  {
    HandMade h({-2}, {1}, 16, kF32);
    expect_refused(h, "shape[0] is -2");
  }
  {
    HandMade h({2, 3}, {-3, 1}, 32, kF32);
    expect_refused(h, "strides[0] is -3");
  }
  {
    HandMade h({3, 2}, {INT64_MAX / 2, 1}, 32, kF32);
    expect_refused(h, "overflows int64");
  }
  {
    HandMade h({INT64_MAX / 4 + 1}, {1}, 32, kF32);  // extent * itemsize overflows
    expect_refused(h, "overflows int64");
  }
  {
    HandMade h({4}, {1}, 16, {dlpack::kDLComplex, 64, 1});
    expect_refused(h, "code 5 with 64 bits");
  }
  {
    HandMade h({4}, {1}, 16, {dlpack::kDLFloat, 32, 4});
    expect_refused(h, "lanes is 4", false);
  }
  {
    HandMade h({4}, {1}, 16, kF32);
    h.m.dl_tensor.data = nullptr;
    expect_refused(h, "data is NULL but the shape holds 4 elements");
  }
  {
    HandMade h({2}, {1}, 16, kF32);
    h.m.dl_tensor.byte_offset = 2;
    expect_refused(h, "byte_offset 2 is not a multiple");
  }
  {
    HandMade h({2}, {1}, 16, kF32);
    h.m.dl_tensor.device = {dlpack::kDLVulkan, 0};
    expect_refused(h, "DLPack device type 7 has no Tessera device");
  }
  {
    HandMade h({2}, {1}, 16, kF32);
    h.m.dl_tensor.ndim = -1;
    expect_refused(h, "ndim is -1");
  }
  {
    HandMade h({2}, {1}, 16, kF32);
    h.m.version.major = 2;  // another layout: only the deleter may be touched
    expect_refused(h, "DLPack 2.x");
  }
  EXPECT_THROW(from_dlpack(static_cast<DLManagedTensorVersioned*>(nullptr)), Error);
}

TEST(DLPack, DeviceMappingIsStableAndRoundTrips) {
  EXPECT_EQ(to_dlpack_device(Device("cpu")).device_type, dlpack::kDLCPU);
  EXPECT_EQ(to_dlpack_device(Device(DeviceType::CUDA, 1)).device_type, dlpack::kDLCUDA);
  EXPECT_EQ(to_dlpack_device(Device(DeviceType::CUDA, 1)).device_id, 1);
  EXPECT_EQ(to_dlpack_device(Device(DeviceType::OpenCL, 0)).device_type, dlpack::kDLOpenCL);
  for (int slot = 1; slot <= 3; ++slot)
    for (int index : {0, 1, 7}) {
      Device d(DeviceType(int(DeviceType::PrivateUse1) + slot - 1), index);
      dlpack::DLDevice dl = to_dlpack_device(d);
      EXPECT_EQ(dl.device_type, dlpack::kDLExtDev);
      EXPECT_EQ(dl.device_id, (slot - 1) * 65536 + index);
      EXPECT_EQ(device_from_dlpack(dl), d);
    }
  EXPECT_THROW(to_dlpack_device(Device(DeviceType::Meta)), Error);
  EXPECT_THROW(device_from_dlpack({dlpack::kDLExtDev, 3 * 65536}), Error);
}

// The renamed backends: memory on the accelerator goes out as kDLExtDev and comes back zero-copy.
TEST(DLPack, RenamedAcceleratorsRoundTripWithoutACopy) {
  for (const char* name : {accel_test::kAccel, accel_test::kSecond}) {
    Tensor host = arange(12, TensorOptions().dtype(kFloat32)).view({3, 4});
    Tensor dev = host.to(Device(std::string(name) + ":0"));
    Tensor view = dev.slice(1, 1, 3);  // non-contiguous, storage offset 1
    DLManagedTensorVersioned* m = to_dlpack(view);
    const Device d = view.device();
    EXPECT_EQ(m->dl_tensor.device.device_type, dlpack::kDLExtDev) << name;
    EXPECT_EQ(device_from_dlpack(m->dl_tensor.device), d) << "names the same Tessera device: " << name;
    EXPECT_EQ(m->dl_tensor.data, dev.storage()->data()) << "the plugin's handle, not a pointer";
    EXPECT_EQ(m->dl_tensor.byte_offset, sizeof(float));
    Tensor back = from_dlpack(m);
    EXPECT_EQ(back.device(), d);
    EXPECT_EQ(back.storage()->data(), dev.storage()->data()) << "zero-copy: " << name;
    EXPECT_EQ(accel_test::values(back), (std::vector<double>{1, 2, 5, 6, 9, 10})) << name;
    dev.add_(full({3, 4}, 100.0, TensorOptions().device(d)));  // the shared memory: writes through one are seen through the other
    EXPECT_EQ(accel_test::values(back)[0], 101.0) << name;
  }
  // A device index the plugin does not have: refused, the deleter still called once.
  HandMade h({2}, {1}, 8, kF32);
  h.m.dl_tensor.device = {dlpack::kDLExtDev, 9};
  expect_refused(h, "my_hardware_device:9 but my_hardware_device has 2 device(s)");
}

}  // namespace
