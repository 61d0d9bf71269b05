// The case table of the conformance kit (cases.cpp). Internal to tests/cts.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <tessera/tessera.h>

namespace tessera::cts {

// Value domains for random inputs (never all zeros).
enum class Domain { Any, Positive, Small, NonZero, Unit };

// Fresh random CPU tensors.
class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  Tensor random(std::vector<int64_t> sizes, DType dtype, Domain domain = Domain::Any);
  Tensor boolean(std::vector<int64_t> sizes);
  Tensor permutation(int64_t n);  // int64, a random order of 0..n-1
  Tensor indices(std::vector<int64_t> sizes, int64_t bound);  // int64 in [0, bound)

 private:
  std::mt19937_64 rng_;
};

struct Case {
  std::string label;  // unique; what --ops globs match
  std::string op;     // operator base name in the catalogue ("add"), for Dispatcher::resolution
  std::vector<DType> dtypes;
  double tol_scale = 1.0;  // widens the dtype tolerance for accumulating ops
  // CPU inputs for `dtype`.
  std::function<std::vector<Tensor>(Gen&, DType)> make;
  // The op, applied to inputs already on the target device.
  std::function<Tensor(const std::vector<Tensor>&, DType)> run;
};

const std::vector<Case>& cases();

}  // namespace tessera::cts
