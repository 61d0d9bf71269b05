// The graph suites of the conformance kit: compiler and quantizer plugins against the reference.
//
// Note [Graph conformance]
// Compiler suite (`tessera check --compiler NAME [--device D]`): each program (small real graphs:
// pointwise chains, a broadcast, matmul + bias + relu, reductions and softmax, a conv block, and
// dynamic shapes, symbolic from the start or automatic, called at several batch sizes) is compiled with CompileOptions::backend = NAME on
// the plugin's device (its manifest's "device", else the CPU; --device overrides) and called on
// fresh random inputs; every output must match the same program compiled with "interpreter" on the
// CPU with the same inputs (float32 tolerance, rtol 1e-4 / atol 1e-5, times 10 for the programs
// that accumulate). The nodes the plugin does not take run through the dispatcher on the device; an
// op the device cannot run makes the program `unsupported`. Each program reports how many
// partitions the plugin took.
// Quantizer suite (`tessera check --quantizer NAME`): each model (MLPs with and without relu, a
// conv net) is exported, annotated by the plugin (prepare), calibrated on three batches, converted
// (quantize / dequantize with the plugin's specs: the reference, run by the interpreter) and lowered
// to int8 kernels (lower_to_int8). Structural check: every linear and conv2d whose weight the
// converted program quantizes was lowered (an annotation that leaves a pattern unlowerable fails,
// naming the node). Numeric check: the lowered program matches the converted one on a fresh batch
// within rtol 0.02 and atol 2% of the largest reference magnitude (one quantization step at most).
// Both suites honour the configuration (cts_config.h) by program name, with dtype float32.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/cts.h"

namespace tessera::cts {

struct GraphOptions {
  std::string plugin;          // the compiler or quantizer plugin (its manifest name)
  std::string device;          // compiler suite: the device to compile for; "" = the plugin's own, else cpu
  std::string programs = "*";  // globs on program names, comma-separated
  uint64_t seed = 0;           // 0 = a fresh seed (reported in Report::seed)
  std::shared_ptr<const Config> config;  // (optional) allowlist, skip list, tolerances
};

// Run the suites. Throw tessera::Error when the plugin or the device is unusable (no plugin of that
// name and kind, it fails to load, no such device); per-program problems are results.
Report run_compiler_suite(const GraphOptions& options);
Report run_quantizer_suite(const GraphOptions& options);

std::vector<std::string> compiler_program_names();
std::vector<std::string> quantizer_program_names();

}  // namespace tessera::cts
