// Semi-structured weights and exported programs (docs/sparsity.md, "Program file"): export refuses a
// semi-structured weight with the way out, and that way out (export the dense weight, save, load,
// compress the loaded weight) runs the sparse kernel with the result of the program before saving.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/compiler/export.h"
#include "tessera/compiler/program_file.h"
#include "tessera/tessera.h"

namespace {

using tessera::Tensor;
namespace sp = tessera::sparse;

std::vector<double> as_doubles(const Tensor& t) {
  Tensor d = t.to(tessera::kFloat64).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

TEST(SparseExport, RefusesASemiStructuredWeight) {
  tessera::manual_seed(30);
  Tensor s = sp::to_sparse_semi_structured(sp::prune_2_4(tessera::randn({8, 16})));
  tessera::ExportOptions opts;
  opts.parameters["w"] = s;
  try {
    tessera::export_program([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::linear(in[0], s)}; },
                            {tessera::randn({2, 16})}, opts);
    FAIL() << "expected an error";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("export: weight 'w' is a 2:4 semi-structured tensor, which an exported "
                                         "program cannot hold; export with tessera::sparse::to_dense(w)"),
              std::string::npos)
        << e.what();
  }
}

TEST(SparseExport, ADenseExportCompressedAfterLoadingRunsLikeBefore) {
  tessera::manual_seed(31);
  const int64_t n = 24, k = 40, batch = 3;
  Tensor w = sp::prune_2_4(tessera::randn({n, k}));
  Tensor b = tessera::randn({n});
  tessera::ExportOptions opts;
  opts.parameters["w"] = w;
  opts.parameters["b"] = b;
  tessera::compiler::ExportedProgram ep = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::linear(in[0], w, b)}; },
      {tessera::randn({batch, k})}, opts);
  Tensor x = tessera::randn({batch, k});
  const std::vector<double> before = as_doubles(ep.run({x}).at(0));

  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tessera_sparse_export_" + std::to_string(::getpid()) + ".tsr")).string();
  tessera::save(ep, path);
  tessera::compiler::ExportedProgram back = tessera::load_program(path);
  std::filesystem::remove(path);
  back.weights["w"] = sp::to_sparse_semi_structured(back.weights.at("w"));
  ASSERT_TRUE(sp::is_sparse(back.weights.at("w")));
  tessera::profiler_clear();
  tessera::profiler_enable("summary");
  const std::vector<double> after = as_doubles(back.run({x}).at(0));
  const std::string summary = tessera::profiler_summary();
  tessera::profiler_enable("");
  tessera::profiler_clear();
  EXPECT_EQ(summary.find("sparse densify"), std::string::npos) << summary;

  // Both against a double loop over the pruned weight (the kernels sum in different orders).
  std::vector<double> xs = as_doubles(x), ws = as_doubles(w), bs = as_doubles(b);
  ASSERT_EQ(before.size(), size_t(batch * n));
  ASSERT_EQ(after.size(), size_t(batch * n));
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = bs[size_t(j)];
      for (int64_t l = 0; l < k; ++l) want += xs[size_t(i * k + l)] * ws[size_t(j * k + l)];
      EXPECT_NEAR(before[size_t(i * n + j)], want, 1e-4 * (1 + std::abs(want)));
      EXPECT_NEAR(after[size_t(i * n + j)], want, 1e-4 * (1 + std::abs(want)));
    }
}

}  // namespace
