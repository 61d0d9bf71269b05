// The skeleton plugin loads, names its device, runs its one kernel and falls back for the rest.
#include <cmath>

#include <gtest/gtest.h>
#include <tessera/dispatcher.h>
#include <tessera/plugin_loader.h>
#include <tessera/tessera.h>

using namespace tessera;

TEST(TemplateDevice, LoadsAndRunsItsKernel) {
  ASSERT_EQ(device_count("template_device"), 1);
  Tensor x = randn({3, 4});
  Tensor d = x.to("template_device");
  EXPECT_TRUE(d.is("template_device"));
  Tensor y = (d + d).to("cpu");
  const float* px = x.data_ptr<float>();
  const float* py = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(py[i], 2 * px[i]) << i;
  OperatorEntry* add = Dispatcher::instance().find_op("add.Tensor");
  ASSERT_NE(add, nullptr);
  // The slot is whichever the manifest claims: ask the name, never hard-code privateuse<N>.
  EXPECT_EQ(Dispatcher::instance().resolution(*add, device_type_from_name("template_device"), kFloat32), Resolution::Kernel);
}

TEST(TemplateDevice, OtherOpsUseTheCpuFallback) {
  Tensor x = randn({5});
  Tensor e = exp(x.to("template_device")).to("cpu");
  const float* px = x.data_ptr<float>();
  const float* pe = e.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(pe[i], std::exp(px[i]), 1e-5 * std::exp(px[i])) << i;
}
