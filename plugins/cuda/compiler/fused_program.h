// A chain of elementwise ops as the CUDA compiler plugin fuses it, and the kernel source made from
// it. Plain C++ (no CUDA header): the source is tested on every machine, by NVRTC for the GPU and
// by the host C++ compiler with the host prelude (tests/cuda/test_cuda_fuser.cpp).
//
// Note [Fused CUDA kernels]
// A partition of `tessera::compile` the plugin takes (Note [Compiler plugin ABI]) is a straight-line
// chain of elementwise ops whose outputs all have one dtype and one shape S. It becomes ONE kernel:
// every thread takes elements i of S (a grid-stride loop), loads each input element, runs the steps
// in registers and stores each output; nothing between the steps touches memory.
// - Registers follow GraphView::value_registers(): the inputs first, then each step's output.
// - Arithmetic is in float for float16, bfloat16 and float32 and in double for float64; an output is
//   rounded to its dtype once, at the store. This is torch.compile's (Inductor's) rule, not eager
//   mode's, which rounds after every op: a float16 chain can differ from eager by one rounding per
//   step (docs/compile.md lists it among the deliberate differences).
// - Constant operands (`x * 2.5`) and `alpha` are converted to the compute type, as eager does.
// - An input may broadcast to S (sizes right-aligned, a 1 or a missing dim repeats) and may be
//   strided: the kernel gets each input's strides per dim of S, 0 where it broadcasts, and a flag
//   for inputs that are contiguous with S's shape, which read element i directly.
// - NaN: relu, maximum and minimum propagate it (fmaxf would drop it), as PyTorch does.
// The kernel is `extern "C" tessera_fused(TsArgs)`; TsArgs (below, and spelled the same in the
// source's prelude) carries the pointers, the element count, S and the strides.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::cuda_fuser {

inline constexpr int kMaxInputs = 16;
inline constexpr int kMaxOutputs = 8;
inline constexpr int kMaxRank = 8;

// The kernel's one parameter. Its text in the generated prelude is kTsArgsText; a test checks that
// the host compiler lays both out the same.
struct TsArgs {
  const void* in[kMaxInputs];
  void* out[kMaxOutputs];
  long long n;     // elements of S
  long long rank;  // of S
  long long sizes[kMaxRank];
  long long strides[kMaxInputs][kMaxRank];  // per input and dim of S, in elements; 0 broadcasts
  int contiguous[kMaxInputs];               // input k is contiguous of shape S: element i is at i
};

enum class FOp {
  Add,
  Sub,
  Mul,
  Div,
  Maximum,
  Minimum,  // binary (Add and Sub take alpha)
  Neg,
  Abs,
  Relu,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Sin,
  Cos,
  Tanh,
  Sigmoid,
  Silu,
  GeluErf,
  GeluTanh,
  Erf,
  Reciprocal,
  PowScalar
};

// An operand: a register (>= 0) or a constant number.
struct Operand {
  int32_t reg = -1;
  double number = 0;
};

struct Step {
  FOp op = FOp::Add;
  Operand a, b;      // b unused by unary ops; PowScalar's exponent is b.number
  double alpha = 1;  // Add / Sub: a + alpha * b, a - alpha * b
};

// The dtype codes of tessera_dtype_t the fuser takes.
enum class FDType : int32_t { Float32 = 0, Float64 = 1, Float16 = 2, BFloat16 = 3 };

struct FusedProgram {
  FDType dtype = FDType::Float32;
  int32_t num_inputs = 0;
  std::vector<Step> steps;           // step s writes register num_inputs + s
  std::vector<int32_t> output_regs;  // what each output stores
};

// Whether the op takes two operands.
bool is_binary(FOp op);

// The op a node target names ("add.Tensor", "relu", "gelu" with approximate "tanh"), if fused.
// `approximate` is gelu's string argument (ignored for other ops).
std::optional<FOp> fused_op(const std::string& target, const std::string& approximate = "none");

// Why the program cannot become a kernel (register numbers out of range, too many inputs or
// outputs), or empty.
std::string check_program(const FusedProgram& p);

// The source of the kernel for NVRTC: the device prelude, then the body.
std::string cuda_source(const FusedProgram& p);
// The same body over the host prelude: an extern "C" function tessera_fused(TsArgs) that runs every
// element in a loop, for tests on machines without a GPU (it includes tessera/float16.h).
std::string host_source(const FusedProgram& p);

// The text of struct TsArgs as the prelude spells it.
extern const char* const kTsArgsText;

}  // namespace tessera::cuda_fuser
