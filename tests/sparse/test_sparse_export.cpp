// Semi-structured weights in exported programs and the program file (docs/export.md,
// "Semi-structured weights"): export keeps the weight compressed, save writes its canonical form,
// load checks every part of it and rebuilds it, and the loaded program's linear runs the sparse
// kernel. Corrupt files are refused with one line naming the weight.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tessera/compiler/export.h"
#include "tessera/compiler/program_file.h"
#include "tessera/compiler/safetensors.h"
#include "tessera/compiler/zip_archive.h"
#include "tessera/plugin_abi.h"
#include "tessera/semi_structured.h"
#include "tessera/sparse_format.h"
#include "tessera/tessera.h"

namespace {

using tessera::Tensor;
namespace sp = tessera::sparse;
namespace tc = tessera::compiler;

std::vector<double> as_doubles(const Tensor& t) {
  Tensor d = sp::to_dense(t).to(tessera::kFloat64).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("tessera_sparse_export_" + tag + "_" + std::to_string(::getpid()) + ".tsr"))
      .string();
}

// True once the sparse plugin's CPU kernel ran on `w`: it publishes its layout in the header at its
// first call (Note [2:4 canonical form]); the dense path never does.
bool sparse_kernel_ran_on(const Tensor& w) {
  const auto* h = static_cast<const tessera_semi_structured_header_t*>(w.storage()->data());
  return __atomic_load_n(&h->layouts[TESSERA_DEVICE_CPU], __ATOMIC_ACQUIRE) != nullptr;
}

// y = x w^T + b in double over the dense (pruned) weight.
std::vector<double> reference_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::vector<double> xs = as_doubles(x), ws = as_doubles(w), bs = as_doubles(b);
  const int64_t batch = x.size(0), k = x.size(1), n = w.size(0);
  std::vector<double> y(size_t(batch * n));
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bs[size_t(j)];
      for (int64_t l = 0; l < k; ++l) acc += xs[size_t(i * k + l)] * ws[size_t(j * k + l)];
      y[size_t(i * n + j)] = acc;
    }
  return y;
}

// Runs `ep` once with the profiler on; true when no call took the dense path.
std::vector<double> run_without_densify(tc::ExportedProgram& ep, const Tensor& x) {
  tessera::profiler_clear();
  tessera::profiler_enable("summary");
  const std::vector<double> y = as_doubles(ep.run({x}).at(0));
  const std::string summary = tessera::profiler_summary();
  tessera::profiler_enable("");
  tessera::profiler_clear();
  EXPECT_EQ(summary.find("sparse densify"), std::string::npos) << summary;
  return y;
}

struct SparseLinear {
  Tensor w_dense, w_sparse, b;
  tc::ExportedProgram ep;
};

// An exported linear(x, w_sparse, b) with w of shape (n, k), 2:4, dtype `dt`.
SparseLinear export_sparse_linear(int64_t n, int64_t k, int64_t batch, tessera::DType dt, uint64_t seed) {
  tessera::manual_seed(seed);
  SparseLinear s;
  s.w_dense = sp::prune_2_4(tessera::randn({n, k}).to(dt));
  s.w_sparse = sp::to_sparse_semi_structured(s.w_dense);
  s.b = tessera::randn({n}).to(dt);
  tessera::ExportOptions opts;
  opts.parameters["w"] = s.w_sparse;
  opts.parameters["b"] = s.b;
  s.ep = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::linear(in[0], s.w_sparse, s.b)}; },
      {tessera::randn({batch, k}).to(dt)}, opts);
  return s;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], rel * (1 + std::abs(want[i]))) << "at " << i;
}

TEST(SparseExport, ExportKeepsTheSemiStructuredWeightAndRunsTheSparseKernel) {
  // 42 columns: 11 groups (an odd count) and a short last group of two.
  SparseLinear s = export_sparse_linear(24, 42, 3, tessera::kFloat32, 30);
  const Tensor& w = s.ep.weights.at("w");
  ASSERT_TRUE(sp::is_sparse(w));
  EXPECT_EQ(w.impl(), s.w_sparse.impl());
  const tc::TensorType& t = s.ep.graph.type(s.ep.signature.inputs.at(1).value);
  EXPECT_EQ(t.dtype, tessera::kFloat32);
  ASSERT_EQ(t.sizes.size(), 2u);
  EXPECT_EQ(t.sizes[0].maybe_constant(), std::optional<int64_t>(24));
  EXPECT_EQ(t.sizes[1].maybe_constant(), std::optional<int64_t>(42));
  EXPECT_FALSE(sparse_kernel_ran_on(w));
  Tensor x = tessera::randn({3, 42});
  const std::vector<double> y = run_without_densify(s.ep, x);
  EXPECT_TRUE(sparse_kernel_ran_on(w));
  expect_near_all(y, reference_linear(x, s.w_dense, s.b), 1e-5);
}

void expect_round_trip(tessera::DType dt, uint64_t seed) {
  SparseLinear s = export_sparse_linear(20, 42, 2, dt, seed);
  const std::string path = temp_path("round_trip");
  tessera::save(s.ep, path);
  tc::ExportedProgram back = tessera::load_program(path);
  std::filesystem::remove(path);
  const Tensor& w = back.weights.at("w");
  ASSERT_TRUE(sp::is_sparse(w)) << tessera::dtype_name(dt);
  EXPECT_EQ(w.dtype(), dt);
  EXPECT_EQ(w.sizes(), s.w_sparse.sizes());
  const Tensor before = sp::to_dense(s.w_sparse), after = sp::to_dense(w);
  ASSERT_EQ(before.nbytes(), after.nbytes());
  EXPECT_EQ(std::memcmp(before.raw_data_ptr(), after.raw_data_ptr(), before.nbytes()), 0) << tessera::dtype_name(dt);
  const sp::SemiStructuredParts a = sp::semi_structured_parts(s.w_sparse), b = sp::semi_structured_parts(w);
  EXPECT_EQ(std::memcmp(a.values.raw_data_ptr(), b.values.raw_data_ptr(), a.values.nbytes()), 0);
  EXPECT_EQ(std::memcmp(a.indices.raw_data_ptr(), b.indices.raw_data_ptr(), a.indices.nbytes()), 0);
}

TEST(SparseExport, SaveAndLoadKeepTheCanonicalFormBitwise) {
  expect_round_trip(tessera::kFloat32, 31);
  expect_round_trip(tessera::kBFloat16, 32);
  expect_round_trip(tessera::kFloat16, 33);
  expect_round_trip(tessera::kInt8, 34);
}

TEST(SparseExport, TheFileHoldsTheTagAndTheCanonicalParts) {
  SparseLinear s = export_sparse_linear(8, 16, 2, tessera::kFloat32, 35);
  const std::string path = temp_path("parts");
  tessera::save(s.ep, path);
  tc::ZipReader zip(tc::Bytes::map_file(path), path);
  const std::vector<uint8_t> text = zip.read(*zip.find("program.json"));
  const std::string pj(text.begin(), text.end());
  EXPECT_NE(pj.find("\"layout\": \"sparse_semi_structured(2:4)\""), std::string::npos) << pj;
  tc::SafetensorsFile st = tc::safetensors_parse(zip.stored_data(*zip.find("weights.safetensors")), zip.bytes(), path);
  std::filesystem::remove(path);
  EXPECT_EQ(st.tensors.count("w"), 0u);
  ASSERT_EQ(st.tensors.count("w.values"), 1u);
  ASSERT_EQ(st.tensors.count("w.indices"), 1u);
  EXPECT_EQ(st.tensors.at("w.values").dtype(), tessera::kFloat32);
  EXPECT_EQ(st.tensors.at("w.values").sizes(), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(st.tensors.at("w.indices").dtype(), tessera::kUInt8);
  EXPECT_EQ(st.tensors.at("w.indices").sizes(), (std::vector<int64_t>{8, 2}));
  // The kept values of row 0, read by hand from the dense weight (two per group, position order).
  const Tensor d = s.w_dense.contiguous();
  const float* dense = d.data_ptr<float>();
  const float* vals = st.tensors.at("w.values").data_ptr<float>();
  const uint8_t* idx = st.tensors.at("w.indices").data_ptr<uint8_t>();
  for (int g = 0; g < 4; ++g) {
    const unsigned nibble = (idx[g / 2] >> (4 * (g % 2))) & 0xfu;
    EXPECT_LT(nibble & 3u, nibble >> 2);
    EXPECT_EQ(vals[2 * g], dense[4 * g + (nibble & 3u)]);
    EXPECT_EQ(vals[2 * g + 1], dense[4 * g + (nibble >> 2)]);
  }
}

TEST(SparseExport, TheLoadedProgramRunsTheSparseKernel) {
  SparseLinear s = export_sparse_linear(24, 40, 3, tessera::kFloat32, 36);
  const std::string path = temp_path("run");
  tessera::save(s.ep, path);
  tc::ExportedProgram back = tessera::load_program(path);
  std::filesystem::remove(path);
  Tensor x = tessera::randn({3, 40});
  EXPECT_FALSE(sparse_kernel_ran_on(back.weights.at("w")));
  const std::vector<double> y = run_without_densify(back, x);
  EXPECT_TRUE(sparse_kernel_ran_on(back.weights.at("w")));
  expect_near_all(y, reference_linear(x, s.w_dense, s.b), 1e-5);
}

TEST(SparseExport, Bf16LoadedProgramRunsTheSparseKernel) {
  SparseLinear s = export_sparse_linear(16, 64, 2, tessera::kBFloat16, 37);
  const std::string path = temp_path("run_bf16");
  tessera::save(s.ep, path);
  tc::ExportedProgram back = tessera::load_program(path);
  std::filesystem::remove(path);
  Tensor x = tessera::randn({2, 64}).to(tessera::kBFloat16);
  const std::vector<double> y = run_without_densify(back, x);
  EXPECT_TRUE(sparse_kernel_ran_on(back.weights.at("w")));
  expect_near_all(y, reference_linear(x, s.w_dense, s.b), 1e-2);  // bf16 output rounding: 2^-8
}

TEST(SparseExport, SaveRefusesAWeightNamedLikeAPart) {
  SparseLinear s = export_sparse_linear(8, 16, 2, tessera::kFloat32, 40);
  s.ep.weights["w.values"] = s.ep.weights.at("b");
  s.ep.weights.erase("b");
  for (tc::InputSpec& in : s.ep.signature.inputs)
    if (in.name == "b") in.name = "w.values";
  const std::string path = temp_path("collision");
  try {
    tessera::save(s.ep, path);
    FAIL() << "expected an error";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("save: a weight's name is also the name of the '.values' or '.indices' entry "
                                         "of a semi-structured weight"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A saved program whose weights.safetensors (tensors) or program.json (text) are rewritten.
class CorruptFile : public ::testing::Test {
 protected:
  void SetUp() override {
    s_ = export_sparse_linear(8, 20, 2, tessera::kFloat32, 38);  // 5 groups: an odd count, a padding nibble
    good_ = temp_path("good");
    bad_ = temp_path("bad");
    tessera::save(s_.ep, good_);
  }
  void TearDown() override {
    std::filesystem::remove(good_);
    std::filesystem::remove(bad_);
  }

  // Loads the rewritten file; returns the error message ("" when it loaded).
  std::string load_rewritten(const std::function<void(std::map<std::string, Tensor>&)>& edit_weights,
                             const std::function<void(std::string&)>& edit_json = {}) {
    {
      tc::ZipReader zip(tc::Bytes::map_file(good_), good_);
      const std::vector<uint8_t> text = zip.read(*zip.find("program.json"));
      std::string pj(text.begin(), text.end());
      tc::SafetensorsFile st = tc::safetensors_parse(zip.stored_data(*zip.find("weights.safetensors")), zip.bytes(), good_);
      std::map<std::string, Tensor> tensors;
      for (auto& [name, t] : st.tensors) tensors[name] = t.clone();
      if (edit_weights) edit_weights(tensors);
      if (edit_json) edit_json(pj);
      const std::vector<uint8_t> bytes = tc::safetensors_serialize(tensors);
      tc::ZipWriter out(bad_);
      out.add("weights.safetensors", bytes);
      out.add("program.json", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(pj.data()), pj.size()), 1);
      out.finish();
    }
    return load_error(bad_);
  }

  static std::string load_error(const std::string& path) {
    try {
      tessera::load_program(path);
    } catch (const tessera::Error& e) {
      return e.what();
    }
    return "";
  }

  // The message is one line and names the file, the weight and `what`.
  void expect_refused(const std::string& message, const std::string& what) {
    EXPECT_NE(message.find(bad_ + ": weights.safetensors: parameter 'w' (sparse_semi_structured(2:4)): "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }

  static uint8_t* indices_of(std::map<std::string, Tensor>& t) { return t.at("w.indices").data_ptr<uint8_t>(); }

  SparseLinear s_;
  std::string good_, bad_;
};

TEST_F(CorruptFile, TheUntouchedCopyLoads) {
  EXPECT_EQ(load_rewritten({}), "");
  EXPECT_TRUE(sp::is_sparse(tessera::load_program(bad_).weights.at("w")));
}

TEST_F(CorruptFile, TruncatedValuesAreRefused) {
  const std::string m = load_rewritten([](auto& t) { t["w.values"] = t.at("w.values").narrow(1, 0, 9).contiguous(); });
  expect_refused(m, "values have shape [8, 9]; a 2:4 tensor of 20 columns keeps (rows, 10)");
}

TEST_F(CorruptFile, MissingRowsAreRefused) {
  const std::string m = load_rewritten([](auto& t) { t["w.values"] = t.at("w.values").narrow(0, 0, 7).contiguous(); });
  expect_refused(m, "'w.values' has shape [7, 10] but the weight has 8 rows");
}

TEST_F(CorruptFile, WrongIndexSizesAreRefused) {
  const std::string m = load_rewritten([](auto& t) { t["w.indices"] = t.at("w.indices").narrow(1, 0, 2).contiguous(); });
  expect_refused(m, "indices have shape [8, 2]; expected (8, 3) for 8 rows of 5 groups of four");
}

TEST_F(CorruptFile, ARepeatedPositionIsRefused) {
  // Row 3, group 2 (low nibble of byte 1): positions 1 and 1.
  const std::string m = load_rewritten([](auto& t) {
    uint8_t* idx = indices_of(t);
    idx[3 * 3 + 1] = uint8_t((idx[3 * 3 + 1] & 0xf0u) | (1u | 1u << 2));
  });
  expect_refused(m, "indices: row 3, group 2 keeps positions 1 and 1; the two positions of a group must be distinct");
}

TEST_F(CorruptFile, DecreasingPositionsAreRefused) {
  const std::string m = load_rewritten([](auto& t) {
    uint8_t* idx = indices_of(t);
    idx[0] = uint8_t((idx[0] & 0x0fu) | (3u | 0u << 2) << 4);  // row 0, group 1: positions 3 then 0
  });
  expect_refused(m, "indices: row 0, group 1 keeps positions 3 and 0");
}

TEST_F(CorruptFile, BitsInThePaddingNibbleAreRefused) {
  const std::string m = load_rewritten([](auto& t) { indices_of(t)[5 * 3 + 2] |= 0x40u; });
  expect_refused(m, "indices: row 5: the unused high nibble of the last byte");
}

TEST_F(CorruptFile, AValuePastTheWidthIsRefused) {
  // 18 columns: the last group has positions 16 and 17 only; point row 2's last group at 16 and 19.
  s_ = export_sparse_linear(8, 18, 2, tessera::kFloat32, 39);
  tessera::save(s_.ep, good_);
  const std::string m = load_rewritten([](auto& t) {
    uint8_t* idx = indices_of(t);
    idx[2 * 3 + 2] = uint8_t(0u | 3u << 2);
    t.at("w.values").template data_ptr<float>()[2 * 10 + 9] = 1.5f;
  });
  expect_refused(m, "values: row 2, group 4 holds a non-zero value at column 19, past the dense width 18");
}

TEST_F(CorruptFile, AValuesDtypeOtherThanTheDeclaredOneIsRefused) {
  const std::string m = load_rewritten([](auto& t) { t["w.values"] = t.at("w.values").to(tessera::kBFloat16); });
  expect_refused(m, "'w.values' has dtype bf16 but program.json declares f32");
}

TEST_F(CorruptFile, IndicesOfAnotherDtypeAreRefused) {
  const std::string m = load_rewritten([](auto& t) { t["w.indices"] = t.at("w.indices").to(tessera::kInt8); });
  expect_refused(m, "indices have dtype");
}

TEST_F(CorruptFile, AMissingPartIsRefused) {
  const std::string m = load_rewritten([](auto& t) { t.erase("w.indices"); });
  expect_refused(m, "the entry 'w.indices' is missing");
}

TEST_F(CorruptFile, AnUnknownLayoutIsRefused) {
  const std::string m = load_rewritten({}, [](std::string& pj) {
    const std::string tag = "sparse_semi_structured(2:4)";
    pj.replace(pj.find(tag), tag.size(), "sparse_semi_structured(4:8)");
  });
  EXPECT_NE(m.find("program.json: signature.inputs[1].layout: unknown layout 'sparse_semi_structured(4:8)' (known: "
                   "sparse_semi_structured(2:4))"),
            std::string::npos)
      << m;
}

TEST_F(CorruptFile, ATruncatedFileIsRefused) {
  std::ifstream in(good_, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(bad_, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
  const std::string m = load_error(bad_);
  EXPECT_NE(m.find(bad_), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(SparseFormat, PartsFromMemoryAreCheckedLikeAFile) {
  Tensor values = tessera::zeros({1, 2});
  Tensor indices = tessera::zeros({1, 1}, tessera::TensorOptions().dtype(tessera::kUInt8));
  indices.data_ptr<uint8_t>()[0] = 0x4;  // positions 0 and 1
  values.data_ptr<float>()[0] = 2.f;
  values.data_ptr<float>()[1] = -3.f;
  Tensor t = sp::from_semi_structured_parts(values, indices, 3);
  ASSERT_TRUE(sp::is_sparse(t));
  const std::vector<double> dense = as_doubles(t);
  EXPECT_EQ(dense, (std::vector<double>{2, -3, 0}));
  try {
    sp::from_semi_structured_parts(values, indices, std::numeric_limits<int64_t>::max());
    FAIL() << "expected an error";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("values have shape [1, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sp::from_semi_structured_parts(values, indices, -1), tessera::Error);
}

}  // namespace
