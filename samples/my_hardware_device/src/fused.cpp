// Fused elementwise programs (include/my_hardware_device/fused.h): the accelerator's driver entry
// that its compiler plugin calls.
//
// Note [Shared driver library]
// The compiler plugin (libmy_hardware_device_compiler.so) is a second plugin of another kind, but
// it must queue work on the very queues the backend plugin created: the stream the runtime passes
// to its `run` is a Queue* of this library's emulator. Real vendors have the same need and solve it
// the same way: the backend and the compiler both link the vendor's shared driver library
// (libcuda.so for CUDA) and so share one driver state per process. Here the backend library is the
// driver: it exports a small plain-C interface (fused.h, default visibility; every other symbol is
// hidden) and has the soname libmy_hardware_device.so. The compiler plugin links against it
// (DT_NEEDED libmy_hardware_device.so, RUNPATH $ORIGIN: both lie in one plugin folder). The dynamic
// loader keeps one instance per soname, whichever of dlopen(backend by absolute path) and the
// dependency of the compiler comes first, so the compiler sees the emulator the backend's entry
// point created. Nothing crosses but C types; the Tessera ABI stays the only contract with the
// runtime, and the driver interface is the vendor's own (versioned by struct_size, like the ABI).
#include <my_hardware_device/fused.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "emulator.h"
#include "kernels.h"

namespace mhd {
namespace {

// The work of one launch, captured by value (Note [Emulated streams]).
struct FusedTask {
  std::vector<mhd_fused_step_t> steps;
  std::vector<int32_t> output_regs;
  std::vector<BufferRef> inputs, outputs;
  std::vector<uint64_t> input_offsets, output_offsets;
  int64_t numel = 0;

  void operator()() const {
    const size_t ni = inputs.size();
    std::vector<float> regs(ni + steps.size());
    std::vector<const std::byte*> in(ni);
    std::vector<std::byte*> out(outputs.size());
    for (size_t i = 0; i < ni; ++i) in[i] = inputs[i]->bytes.data() + input_offsets[i];
    for (size_t i = 0; i < outputs.size(); ++i) out[i] = outputs[i]->bytes.data() + output_offsets[i];
    for (int64_t e = 0; e < numel; ++e) {
      for (size_t i = 0; i < ni; ++i) std::memcpy(&regs[i], in[i] + e * 4, 4);
      for (size_t s = 0; s < steps.size(); ++s) {
        const mhd_fused_step_t& st = steps[s];
        const float a = st.a >= 0 ? regs[size_t(st.a)] : st.scalar_a;
        const float b = st.b >= 0 ? regs[size_t(st.b)] : st.scalar_b;
        float r = 0;
        switch (st.op) {
          case MHD_FUSED_ADD:
            r = a + st.alpha * b;
            break;
          case MHD_FUSED_SUB:
            r = a - st.alpha * b;
            break;
          case MHD_FUSED_MUL:
            r = a * b;
            break;
          case MHD_FUSED_DIV:
            r = a / b;
            break;
          case MHD_FUSED_RELU:
            r = std::isnan(a) ? a : (a > 0.0f ? a : 0.0f);
            break;
          case MHD_FUSED_NEG:
            r = -a;
            break;
          case MHD_FUSED_EXP:
            r = std::exp(a);
            break;
          case MHD_FUSED_TANH:
            r = std::tanh(a);
            break;
          default:
            r = 1.0f / (1.0f + std::exp(-a));
            break;  // MHD_FUSED_SIGMOID (checked at launch)
        }
        regs[ni + s] = r;
      }
      for (size_t o = 0; o < out.size(); ++o) std::memcpy(out[o] + e * 4, &regs[size_t(output_regs[o])], 4);
    }
  }
};

[[noreturn]] void fail(const std::string& message) {
  throw EmuError(EmuError::Kind::InvalidArgument, message);
}

// The buffer behind `b`, checked to hold `numel` float32 elements at its offset on `device`.
BufferRef checked_buffer(Emulator& emu, int device, const mhd_fused_buffer_t& b, int64_t numel,
                         const char* what, size_t index) {
  const std::string name = std::string(what) + " " + std::to_string(index);
  uint64_t bytes = 0, end = 0;
  if (__builtin_mul_overflow(uint64_t(numel), uint64_t(4), &bytes) ||
      __builtin_add_overflow(bytes, b.byte_offset, &end))
    fail(name + ": " + std::to_string(numel) + " elements at byte offset " + std::to_string(b.byte_offset) +
         " overflow 64 bits");
  if (b.handle && Emulator::device_of_handle(b.handle) != device)
    fail(name + " does not live on device " + std::to_string(device) +
         "; pass buffers of the launching device");
  BufferRef buf = emu.resolve(b.handle);
  if (end > buf->bytes.size())
    fail(name + ": " + std::to_string(numel) + " float32 elements at byte offset " +
         std::to_string(b.byte_offset) + " overrun its buffer of " + std::to_string(buf->bytes.size()) +
         " bytes");
  return buf;
}

void check_program(const mhd_fused_program_t& p) {
  if (p.struct_size < sizeof(mhd_fused_program_t))
    fail("program struct_size is " + std::to_string(p.struct_size) + ", expected at least " +
         std::to_string(sizeof(mhd_fused_program_t)) + "; rebuild against this driver's fused.h");
  if (p.num_inputs < 0 || p.num_steps < 0 || p.num_outputs < 0)
    fail("program has a negative count (inputs " + std::to_string(p.num_inputs) + ", steps " +
         std::to_string(p.num_steps) + ", outputs " + std::to_string(p.num_outputs) + ")");
  if ((p.num_steps && !p.steps) || (p.num_outputs && !p.output_regs))
    fail("program steps or output_regs is NULL");
  for (int32_t s = 0; s < p.num_steps; ++s) {
    const mhd_fused_step_t& st = p.steps[s];
    const int32_t defined = p.num_inputs + s;  // registers written before step s
    if (st.op < 0 || st.op >= MHD_FUSED_NUM_OPS)
      fail("step " + std::to_string(s) + ": unknown op " + std::to_string(st.op) + " (expected 0.." +
           std::to_string(MHD_FUSED_NUM_OPS - 1) + ")");
    const bool binary = st.op <= MHD_FUSED_DIV;
    for (int32_t r : {st.a, binary ? st.b : -1})
      if (r < -1 || r >= defined)
        fail("step " + std::to_string(s) + " reads register " + std::to_string(r) + "; registers 0.." +
             std::to_string(defined - 1) + " are written before it (-1: the scalar)");
  }
  for (int32_t o = 0; o < p.num_outputs; ++o)
    if (p.output_regs[o] < 0 || p.output_regs[o] >= p.num_inputs + p.num_steps)
      fail("output " + std::to_string(o) + " names register " + std::to_string(p.output_regs[o]) + " of " +
           std::to_string(p.num_inputs + p.num_steps));
}

}  // namespace
}  // namespace mhd

extern "C" int32_t mhd_fused_launch(int32_t device, void* stream, const mhd_fused_program_t* program,
                                    const mhd_fused_buffer_t* inputs, const mhd_fused_buffer_t* outputs,
                                    int64_t numel, char* error, size_t error_capacity) {
  using namespace mhd;
  try {
    Emulator* emu = emulator();
    if (!emu)
      throw EmuError(EmuError::Kind::Internal, "the device is shut down (or its plugin never loaded)");
    if (!program) fail("program is NULL");
    check_program(*program);
    if (numel < 0) fail("numel is " + std::to_string(numel) + "; expected >= 0");
    if ((program->num_inputs && !inputs) || (program->num_outputs && !outputs))
      fail("inputs or outputs is NULL");
    Device& dev = emu->device(device);
    Queue& queue = emu->queue(device, stream);
    FusedTask task;
    task.steps.assign(program->steps, program->steps + program->num_steps);
    task.output_regs.assign(program->output_regs, program->output_regs + program->num_outputs);
    task.numel = numel;
    for (int32_t i = 0; i < program->num_inputs; ++i) {
      task.inputs.push_back(checked_buffer(*emu, device, inputs[i], numel, "input", size_t(i)));
      task.input_offsets.push_back(inputs[i].byte_offset);
    }
    for (int32_t i = 0; i < program->num_outputs; ++i) {
      task.outputs.push_back(checked_buffer(*emu, device, outputs[i], numel, "output", size_t(i)));
      task.output_offsets.push_back(outputs[i].byte_offset);
    }
    dev.fused_launch_count()++;
    queue.enqueue(traced(std::move(task), "fused program", "kernel", device, queue));
    return 0;
  } catch (const std::exception& e) {
    if (error && error_capacity) std::snprintf(error, error_capacity, "mhd_fused_launch: %s", e.what());
    return -1;
  }
}

extern "C" int64_t mhd_fused_launch_count(int32_t device) {
  mhd::Emulator* emu = mhd::emulator();
  if (!emu || device < 0 || device >= emu->num_devices()) return -1;
  return emu->device(device).fused_launch_count().load();
}
