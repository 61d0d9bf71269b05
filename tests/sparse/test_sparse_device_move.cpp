// Semi-structured tensors moved to a device through a kernels plugin's
// TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT (Note [Semi-structured tensors on a device]), on the
// reference accelerator with a test plugin (device_layout_plugin/) that offers the extension and no
// kernels: the path .to("cuda") takes with the sparse_cuda plugin, checked without a GPU.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/semi_structured.h"
#include "tessera/sparse_format.h"
#include "tessera/tessera.h"

namespace {

using tessera::Tensor;
namespace sp = tessera::sparse;

const char* kDevice = "my_hardware_device";

// The storage bytes of a tensor on the accelerator, read back to the host.
std::vector<uint8_t> device_bytes(const Tensor& t, size_t n) {
  Tensor raw(tessera::make_intrusive<tessera::TensorImpl>(t.storage(), tessera::kUInt8, t.device(),
                                                          tessera::IntArrayRef{int64_t(n)},
                                                          tessera::IntArrayRef{int64_t(1)}, 0));
  Tensor host = raw.to("cpu");
  const auto* p = static_cast<const uint8_t*>(host.raw_data_ptr());
  return std::vector<uint8_t>(p, p + n);
}

TEST(SparseDeviceMove, ToADeviceWithTheExtensionKeepsItSemiStructured) {
  tessera::manual_seed(41);
  Tensor w = sp::prune_2_4(tessera::randn({9, 22}));
  Tensor s = sp::to_sparse_semi_structured(w);
  Tensor d = s.to(kDevice);
  ASSERT_TRUE(sp::is_sparse(d));
  EXPECT_EQ(d.device().str(), "my_hardware_device:0");
  EXPECT_EQ(d.sizes(), w.sizes());
  EXPECT_EQ(d.dtype(), tessera::kFloat32);
  EXPECT_NE(sp::describe(d).find("device=my_hardware_device:0"), std::string::npos) << sp::describe(d);

  // The device storage holds exactly the plugin's bytes: the canonical block reversed.
  const auto* h = static_cast<const tessera_semi_structured_header_t*>(s.storage()->data());
  const std::vector<uint8_t> bytes = device_bytes(d, h->total_bytes);
  const auto* canonical = reinterpret_cast<const uint8_t*>(h);
  const size_t layouts = offsetof(tessera_semi_structured_header_t, layouts);
  for (uint64_t i = 0; i < h->total_bytes; ++i) {
    if (i >= layouts && i < layouts + sizeof h->layouts) continue;  // the CPU layout pointers may change
    ASSERT_EQ(bytes[h->total_bytes - 1 - i], canonical[i]) << "byte " << i;
  }

  // Back to the CPU: the canonical tensor it came from; to another device again: semi-structured.
  Tensor back = d.to("cpu");
  EXPECT_EQ(back.impl(), s.impl());
  EXPECT_TRUE(sp::is_sparse(d.to(kDevice)));

  // Densified on the device it lives on; the parts and the printout come from the canonical form.
  Tensor dense = sp::to_dense(d);
  EXPECT_FALSE(sp::is_sparse(dense));
  EXPECT_EQ(dense.device().str(), "my_hardware_device:0");
  EXPECT_TRUE(tessera::equal(dense.to("cpu"), w));
  const sp::SemiStructuredParts a = sp::semi_structured_parts(d), b = sp::semi_structured_parts(s);
  EXPECT_TRUE(tessera::equal(a.values, b.values));
  EXPECT_TRUE(tessera::equal(a.indices, b.indices));
  EXPECT_NE(tessera::to_string(d).find("layout=sparse_semi_structured(2:4)"), std::string::npos);
}

// No sparse kernel for the device: linear and matmul take the dense path there, with the result of
// the dense weight.
TEST(SparseDeviceMove, LinearWithoutADeviceKernelTakesTheDensePath) {
  tessera::manual_seed(42);
  Tensor w = sp::prune_2_4(tessera::randn({12, 40}));
  Tensor x = tessera::randn({3, 40}), bias = tessera::randn({12});
  Tensor d = sp::to_sparse_semi_structured(w).to(kDevice);
  Tensor y = tessera::linear(x.to(kDevice), d, bias.to(kDevice));
  EXPECT_EQ(y.device().str(), "my_hardware_device:0");
  EXPECT_TRUE(tessera::allclose(y.to("cpu"), tessera::linear(x, w, bias), 1e-5, 1e-5));
  Tensor z = tessera::matmul(d, x.t().contiguous().to(kDevice));
  EXPECT_TRUE(tessera::allclose(z.to("cpu"), tessera::matmul(w, x.t().contiguous()), 1e-5, 1e-5));
}

// A dtype the plugin answers UNIMPLEMENTED for moves as the dense weight, as without the plugin.
TEST(SparseDeviceMove, ADtypeThePluginDoesNotTakeMovesDense) {
  tessera::manual_seed(43);
  Tensor w =
      sp::prune_2_4(tessera::mul(tessera::randn({4, 8}), tessera::full({4, 8}, 50.0))).to(tessera::kInt8);
  Tensor d = sp::to_sparse_semi_structured(w).to(kDevice);
  EXPECT_FALSE(sp::is_sparse(d));
  EXPECT_EQ(d.device().str(), "my_hardware_device:0");
  EXPECT_TRUE(tessera::equal(d.to("cpu"), w));
}

// Any other error status reaches the caller as an exception naming the plugin and its reason.
TEST(SparseDeviceMove, APluginRefusalIsReported) {
  Tensor s = sp::to_sparse_semi_structured(sp::prune_2_4(tessera::randn({4, 8})).to(tessera::kFloat16));
  try {
    (void)s.to(kDevice);
    FAIL() << "expected an error";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sparse_test_device_layout"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float16 is refused"), std::string::npos) << e.what();
  }
}

}  // namespace
