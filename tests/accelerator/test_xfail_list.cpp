// tessera_add_plugin(... XFAIL <device>.xfail.txt) places the expected-failure list next to the
// manifest, where the conformance kit looks for it.
#include <gtest/gtest.h>

#include <filesystem>

#include <tessera/cts.h>

namespace {

TEST(XFailList, TesseraAddPluginPlacesTheListWhereTheKitFindsIt) {
  const std::filesystem::path want = std::filesystem::path(ACCEL_TEST_PLUGIN_DIR) / "second_accelerator.xfail.txt";
  ASSERT_TRUE(std::filesystem::exists(want)) << want;
  tessera::cts::Options options;
  options.device = "second_accelerator";
  options.ops = "exp";
  options.dtypes = {tessera::kFloat64};
  options.seed = 7;
  const tessera::cts::Report report = tessera::cts::run(options);
  EXPECT_EQ(std::filesystem::path(report.xfail_file), want);
  ASSERT_FALSE(report.cases.empty());
  for (const auto& c : report.cases)
    EXPECT_EQ(c.outcome, tessera::cts::Outcome::XPass) << c.op << " " << tessera::cts::outcome_name(c.outcome);
}

}  // namespace
