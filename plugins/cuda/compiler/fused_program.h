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
//
// Note [Fused row reductions]
// A partition may also reduce over the last dim of its domain S = [rows..., K] (sum, mean, amax,
// amin over dim -1, keepdim or not) and go on from the result: softmax written out, a norm, a
// residual add before layer_norm. softmax, log_softmax, layer_norm and rms_norm over the last dim
// are taken whole and written as those steps by the plugin (as decompose_for_codegen does for the
// C++ backend). Such a "row program" is one kernel too, shaped differently:
// - A register holds one value per element of S or one per row. An input whose last dim
//   broadcasts (a [rows, 1] tensor, a number-like [1]) is a row input; an element of a step with
//   an element operand is an element; a reduction's result is a row value.
// - One block per row (a grid-stride loop over rows). Each reduction is one pass over the row: the
//   threads walk the columns, load the element inputs it needs, recompute the element steps it
//   depends on and combine into an accumulator, then the block combines the threads' values (warp
//   shuffles, then shared memory) and every thread has the row value. Steps on row values run
//   after the reduction they read, in every thread. A last pass computes and stores the element
//   outputs; thread 0 stores the row outputs at [row]. Recomputing a prologue per pass reads the
//   row again (from L1/L2 for the rows a norm sees) instead of keeping it in registers. A few
//   long rows would idle the GPU: the plugin leaves such reductions (lowering.cpp, few_long_rows).
// - Sums accumulate in the compute type (float for float16/bfloat16/float32, double for float64)
//   in the block's order, so they differ from eager's order by float rounding; mean is the sum
//   divided by K; amax and amin propagate NaN, so softmax of a row holding a NaN is NaN, as
//   PyTorch's. The block size is a multiple of 32 up to 512 (row_launch).
// - K == 0: sum is 0 and mean NaN, as eager; amax / amin have no identity, so a program whose row
//   outputs read one is refused at run time, naming the op (element outputs are empty then).
// A row value read by a later element step broadcasts along the row; a keepdim=False result is
// only an output (the plugin does not read a flat [rows] value as a row inside the program).
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
  PowScalar,
  // Reductions over the last dim of the domain (Note [Fused row reductions]): a row value.
  RowSum,
  RowMean,
  RowMax,
  RowMin
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
  // Row programs only (those with a reduction step): per input, 1 when it holds one value per row.
  std::vector<uint8_t> row_input;
};

// Whether the op takes two operands.
bool is_binary(FOp op);
bool is_reduction(FOp op);
bool is_row_program(const FusedProgram& p);
// Per register of a row program: whether it holds one value per row (else one per element).
std::vector<bool> row_registers(const FusedProgram& p);
// The reduction ("amax" / "amin") a row output of the program needs a non-empty row for, or null.
const char* needs_nonempty_rows(const FusedProgram& p);

// The grid of a row program: threads a block (a multiple of 32, at most kMaxRowThreads) and blocks
// (at most `rows`, at least 1; enough to fill `sm_count` multiprocessors).
inline constexpr int kMaxRowThreads = 512;
struct RowLaunch {
  int threads = 32;
  int64_t blocks = 1;
};
RowLaunch row_launch(int64_t rows, int64_t k, int sm_count);

// One tensor of a launch as fill_args reads it.
struct ArgTensor {
  const void* data = nullptr;
  std::vector<int64_t> sizes, strides;  // strides in elements
};
struct LaunchShape {
  int64_t n = 0;     // elements of S
  int64_t rows = 0;  // row programs: the product of S's dims but the last
  int64_t k = 0;     // row programs: S's last dim
};
// Fills `a` for one launch and says what it launches; throws std::invalid_argument naming what
// does not fit. S is outputs[0]'s shape for an elementwise program, and the broadcast of the
// inputs' shapes for a row program (every element step's shape broadcasts from them); each input
// must broadcast to S, an element output must have n elements and a row output `rows`.
LaunchShape fill_args(const FusedProgram& p, const std::vector<ArgTensor>& inputs,
                      const std::vector<ArgTensor>& outputs, TsArgs* a);

// One launch of a program: its arguments and grid (blocks 0: nothing to launch). Elementwise
// programs use 256 threads and at most 16 blocks a multiprocessor; row programs row_launch. Throws
// std::invalid_argument as fill_args does, and for an amax / amin over an empty last dim that a row
// output reads (Note [Fused row reductions]).
inline constexpr int kElementwiseThreads = 256;
struct LaunchPlan {
  TsArgs args{};
  LaunchShape shape;
  int64_t blocks = 0;
  int threads = kElementwiseThreads;
};
LaunchPlan plan_launch(const FusedProgram& p, const std::vector<ArgTensor>& inputs,
                       const std::vector<ArgTensor>& outputs, int sm_count);

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
