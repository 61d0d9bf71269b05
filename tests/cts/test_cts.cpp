// The conformance kit run for every device the main build provides, plus the kit's own mechanics
// (globs, expected-failure lists, classification).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>

#include <unistd.h>

#include <gtest/gtest.h>
#include <tessera/cts.h>
#include <tessera/cts_config.h>
#include <tessera/op_info.h>
#include <tessera/tessera.h>

using namespace tessera;

namespace {
bool device_present(const std::string& name) {
  try {
    return device_count(name) > 0;
  } catch (const Error&) {
    return false;
  }
}
const cts::CaseResult* find_case(const cts::Report& r, const std::string& op, DType t) {
  for (const auto& c : r.cases)
    if (c.op == op && c.dtype == t) return &c;
  return nullptr;
}
}  // namespace

TEST(CtsMechanics, GlobMatching) {
  EXPECT_TRUE(cts::glob_match("*", "add"));
  EXPECT_TRUE(cts::glob_match("add*", "add_broadcast"));
  EXPECT_TRUE(cts::glob_match("s?m", "sum"));
  EXPECT_TRUE(cts::glob_match("*.Tensor", "add.Tensor"));
  EXPECT_FALSE(cts::glob_match("add", "add_alpha"));
  EXPECT_FALSE(cts::glob_match("*norm", "normal"));
}

TEST(CtsMechanics, ParsesExpectedFailureLists) {
  auto e = cts::parse_xfail("# comment\n\nmatmul float16   # slow accumulate\nsoftmax*\n  gelu  bfloat16\n");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].op_glob, "matmul");
  EXPECT_EQ(e[0].dtype_glob, "float16");
  EXPECT_EQ(e[1].op_glob, "softmax*");
  EXPECT_EQ(e[1].dtype_glob, "*");
  EXPECT_EQ(e[2].dtype_glob, "bfloat16");
  EXPECT_THROW(cts::parse_xfail("add float32 extra\n"), Error);
}

TEST(CtsMechanics, EveryCoreOpHasACase) {
  const auto labels = cts::case_labels();
  for (const char* op : {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
                         "ge", "logical_and", "logical_or", "where", "neg", "abs", "exp", "log", "sqrt", "rsqrt",
                         "sin", "cos", "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "sum", "mean", "amax",
                         "amin", "prod", "var", "argmax", "matmul", "linear", "softmax", "log_softmax",
                         "layer_norm", "rms_norm", "conv2d", "max_pool2d", "avg_pool2d", "embedding",
                         "scaled_dot_product_attention", "cat", "stack", "index_select", "gather", "fill_",
                         "copy_", "clone", "zeros", "full", "arange"}) {
    EXPECT_NE(std::find(labels.begin(), labels.end(), op), labels.end()) << op;
  }
}

// Adding an op to the contract means adding its cases (docs/adding-an-op.md): every op of ops.json
// the runtime implements has a case, but for the ones listed here, which the kit does not run yet.
TEST(CtsMechanics, EveryOpOfTheContractHasACase) {
  const std::vector<std::string> ops = cts::case_ops();
  const std::vector<std::string> not_in_the_kit = {
      "empty_strided", "_to_copy", "contiguous",  // reached through zeros, to() and copy_ cases
      "uniform_", "normal_",                      // random streams: tests/cpu, tests/opencl
      "add_", "mul_",                             // in-place variants of add and mul
      "quantize_per_tensor", "quantize_per_channel", "dequantize", "int_repr", "_quantized_linear_prepack",
      "_quantized_linear", "_quantized_conv2d", "_quantized_linear_dynamic"};  // tests/quant
  for (const tessera::op::OpInfo& info : tessera::op::kOpInfos) {
    if (std::string(info.provider) != "builtin") continue;  // a plugin's own op: its plugin's tests
    const bool listed = std::find(not_in_the_kit.begin(), not_in_the_kit.end(), info.base) != not_in_the_kit.end();
    const bool covered = std::find(ops.begin(), ops.end(), info.base) != ops.end();
    EXPECT_TRUE(covered || listed) << info.name << " has no conformance case; add one in tests/cts/src/cases.cpp";
    EXPECT_FALSE(covered && listed) << info.name << " has cases now; take it off the list";
  }
}

TEST(CtsMechanics, ListedFailuresThatPassAreReportedAsXPass) {
  const auto path = std::filesystem::temp_directory_path() / ("tessera_cts_xfail_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream f(path);
    f << "add float32  # listed on purpose\n";
  }
  cts::Options o;
  o.device = "cpu";
  o.ops = "add";
  o.dtypes = {kFloat32, kInt64};
  o.xfail_file = path.string();
  cts::Report r = cts::run(o);
  std::filesystem::remove(path);
  ASSERT_NE(find_case(r, "add", kFloat32), nullptr);
  EXPECT_EQ(find_case(r, "add", kFloat32)->outcome, cts::Outcome::XPass);
  EXPECT_EQ(find_case(r, "add", kInt64)->outcome, cts::Outcome::Pass);
  EXPECT_EQ(r.unexpected_failures(), 0);
  EXPECT_NE(cts::format_json(r).find("\"xpass\": 1"), std::string::npos) << cts::format_json(r);
}

TEST(CtsMechanics, ClassifiesOwnKernelsAndFallbackOnTheAccelerator) {
  if (!device_present("my_hardware_device")) GTEST_SKIP() << "my_hardware_device not built";
  cts::Options o;
  o.device = "my_hardware_device";
  o.ops = "add,exp,conv2d";
  o.dtypes = {kFloat32, kFloat16};
  cts::Report r = cts::run(o);
  ASSERT_NE(find_case(r, "add", kFloat32), nullptr);
  EXPECT_EQ(find_case(r, "add", kFloat32)->outcome, cts::Outcome::Pass) << find_case(r, "add", kFloat32)->message;
  EXPECT_EQ(find_case(r, "add", kFloat16)->outcome, cts::Outcome::Fallback);  // outside the kernel's dtype mask
  EXPECT_EQ(find_case(r, "exp", kFloat32)->outcome, cts::Outcome::Fallback);  // no kernel at all
  EXPECT_EQ(find_case(r, "conv2d", kFloat32)->outcome, cts::Outcome::Unsupported);  // fallback forbidden
}

// Note [Conformance configuration]: the configuration file's rules, applied by the runner.
TEST(CtsConfig, SkipEntriesAreReportedWithTheirReasonNeverAsPasses) {
  cts::Options o;
  o.device = "cpu";
  o.ops = "add,relu,exp";
  o.dtypes = {kFloat32, kInt64};
  o.config = std::make_shared<cts::Config>(cts::Config::parse(R"({"config_version": 1,
      "allow": ["add*", "relu"],
      "skip": [{"case": "relu", "dtypes": ["f32"], "reason": "vendor ticket 7"},
               {"case": "add", "devices": ["npu"], "reason": "not on this device"}]})",
                                                              "inline.json"));
  cts::Report r = cts::run(o);
  EXPECT_EQ(r.config_file, "inline.json");
  EXPECT_EQ(find_case(r, "exp", kFloat32), nullptr);  // not in the allowlist
  ASSERT_NE(find_case(r, "relu", kFloat32), nullptr);
  EXPECT_EQ(find_case(r, "relu", kFloat32)->outcome, cts::Outcome::Skip);
  EXPECT_EQ(find_case(r, "relu", kFloat32)->message, "vendor ticket 7");
  EXPECT_EQ(find_case(r, "relu", kInt64)->outcome, cts::Outcome::Pass);  // the entry names float32 only ("f32")
  EXPECT_EQ(find_case(r, "add", kFloat32)->outcome, cts::Outcome::Pass);  // its rule is for npu
  // "relu" names the operator too: every float32 case of relu is skipped, and nothing else.
  for (const auto& c : r.cases) {
    const bool relu_f32 = c.op_name.rfind("relu", 0) == 0 && c.dtype == kFloat32;
    EXPECT_EQ(c.outcome, relu_f32 ? cts::Outcome::Skip : cts::Outcome::Pass) << c.op << " " << dtype_name(c.dtype);
  }
  EXPECT_NE(cts::format_table(r).find("skip relu float32: vendor ticket 7"), std::string::npos) << cts::format_table(r);
}

TEST(CtsConfig, ToleranceOverridesPerDtypeWinOverPerOpAndDevicesComeFirst) {
  const cts::Config c = cts::Config::parse(R"({"config_version": 1,
      "tolerances": {"matmul": {"atol": 0.5, "rtol": 0.25, "dtypes": {"bfloat16": {"rtol": 0.125}}},
                     "add*": {"atol": 2}},
      "devices": {"np?": {"tolerances": {"matmul": {"atol": 8}}}}})",
                                           "t.json");
  double rtol = 1, atol = 1;
  c.tolerance("cpu", "matmul_batched", "matmul.default", kFloat32, &rtol, &atol);
  EXPECT_EQ(rtol, 0.25);
  EXPECT_EQ(atol, 0.5);
  rtol = atol = 1;
  c.tolerance("cpu", "matmul", "matmul.default", kBFloat16, &rtol, &atol);
  EXPECT_EQ(rtol, 0.125);  // the dtype entry
  EXPECT_EQ(atol, 0.5);    // left out there: the op's
  rtol = atol = 1;
  c.tolerance("npu", "matmul", "matmul.default", kFloat32, &rtol, &atol);
  EXPECT_EQ(atol, 8);
  EXPECT_EQ(rtol, 1);  // the device entry decides alone
  rtol = atol = 1;
  c.tolerance("cpu", "relu", "relu", kFloat32, &rtol, &atol);
  EXPECT_EQ(rtol, 1);
  EXPECT_EQ(atol, 1);  // no entry: the defaults stay
}

TEST(CtsConfig, ErrorsNameTheFileThePathAndTheNearestName) {
  auto error_of = [](const std::string& text) {
    try {
      cts::Config::parse(text, "vendor.json");
    } catch (const cts::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(R"({"config_version": 1, "skip": [{"case": "relu", "reason": "r"}, {"case": "lyer_norm", "reason": "r"}]})"),
            "vendor.json: $.skip[1].case: 'lyer_norm' names no case, operator or program; did you mean 'layer_norm'? "
            "(see `tessera check --list`)");
  EXPECT_NE(error_of(R"({"config_version": 1, "allow": ["relu"], "skp": []})").find("vendor.json: $.skp: unknown key 'skp'; did you mean 'skip'?"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"config_version": 1, "skip": [{"case": "relu"}]})").find("$.skip[0]: missing \"reason\""),
            std::string::npos);
  EXPECT_NE(error_of("{\"config_version\": 1,\n \"allow\": [}").find("line 2"), std::string::npos);
  EXPECT_EQ(cts::nearest_name("sofmax", {"softmax", "log_softmax", "relu"}), "softmax");
  EXPECT_EQ(cts::nearest_name("completely_different", {"softmax", "relu"}), "");
}

class ConformanceKit : public testing::TestWithParam<std::string> {};

TEST_P(ConformanceKit, NoUnexpectedFailures) {
  const std::string device = GetParam();
  if (!device_present(device)) GTEST_SKIP() << device << " is not available in this build";
  cts::Options o;
  o.device = device;
  cts::Report r = cts::run(o);
  std::printf("%s", cts::format_table(r).c_str());
  EXPECT_GT(r.count(cts::Outcome::Pass), 0);
  EXPECT_EQ(r.unexpected_failures(), 0) << cts::format_table(r);
}

INSTANTIATE_TEST_SUITE_P(Devices, ConformanceKit, testing::Values("cpu", "my_hardware_device"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });
