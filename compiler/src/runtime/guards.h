// Internal: the guard set of one compiled artifact (Note [Compiled functions] in compile.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/compiler/ir.h"
#include "tessera/tensor.h"

namespace tessera::compiler {

class ArtifactGuards {
 public:
  ArtifactGuards() = default;
  // The guards of `program` for inputs on `devices` (one per user input, the capturing call's).
  ArtifactGuards(const ExportedProgram& program, const std::vector<Device>& devices);
  // Static guards only: the exact dtypes, devices and sizes of `inputs` (an artifact that runs fn
  // eagerly).
  static ArtifactGuards exact(const std::vector<Tensor>& inputs);

  // True when every guard holds. Allocates nothing unless the program has guards between symbols.
  bool accepts(const std::vector<Tensor>& inputs) const;
  // The first guard that fails, as one line ("x0: dim 0 is 7, expected 4"); empty when all hold.
  std::string first_failure(const std::vector<Tensor>& inputs) const;
  // 2 when the inputs differ only in sizes (same count, dtypes, devices and ranks), 1 when they
  // differ in sizes and ranks, else 0: which artifact's failure explains a miss best.
  int similarity(const std::vector<Tensor>& inputs) const;
  bool same_types(const std::vector<Tensor>& inputs) const { return similarity(inputs) == 2; }

  // "f32[s0, 4] cpu, f32[4] cpu"
  std::string str() const;
  int symbolic_dims() const { return symbolic_dims_; }

 private:
  static constexpr int32_t kStatic = -1;
  struct InputGuard {
    std::string name;
    DType dtype = DType::Float32;
    Device device{DeviceType::CPU};
    std::vector<int64_t> sizes;   // static sizes; unused where the dim is symbolic
    std::vector<int32_t> symbol;  // index into symbols_, or kStatic
  };
  struct Symbol {
    std::string name;
    SymbolRange range;
  };
  // Binds symbols into `bound`; returns the first failure (empty when all hold) when `why`.
  bool check(const std::vector<Tensor>& inputs, std::string* why) const;

  std::vector<InputGuard> inputs_;
  std::vector<Symbol> symbols_;
  std::vector<Guard> relations_;  // the program's guards between symbols
  // Sizes that are expressions over the symbols, checked after binding: (input, dim, size).
  struct Derived {
    size_t input, dim;
    SymSize size;
  };
  std::vector<Derived> derived_;
  int symbolic_dims_ = 0;
};

}  // namespace tessera::compiler
