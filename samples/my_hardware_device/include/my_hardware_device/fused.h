/* The reference accelerator's driver interface for fused elementwise programs: plain C, exported
 * (default visibility) by libmy_hardware_device.so next to its plugin entry point. A second library
 * that links against it (its compiler plugin, src/compiler_plugin.cpp) queues work on the same
 * emulated devices and streams the runtime uses; see Note [Shared driver library].
 *
 * A program is a list of float32 steps over registers: registers 0 .. num_inputs-1 hold the
 * inputs' elements, step i writes register num_inputs + i. Every buffer holds `numel` contiguous
 * float32 elements at its byte offset. The device computes element by element, in float, and
 * stores the registers named by `output_regs` into the outputs.
 *
 * Thread-safety: every function may be called from any thread. */
#ifndef MY_HARDWARE_DEVICE_FUSED_H_
#define MY_HARDWARE_DEVICE_FUSED_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MHD_FUSED_API __attribute__((visibility("default")))

typedef enum mhd_fused_op_t {
  MHD_FUSED_ADD = 0, /* a + alpha * b */
  MHD_FUSED_SUB,     /* a - alpha * b */
  MHD_FUSED_MUL,     /* a * b */
  MHD_FUSED_DIV,     /* a / b */
  MHD_FUSED_RELU,    /* max(a, 0), NaN stays NaN */
  MHD_FUSED_NEG,     /* -a */
  MHD_FUSED_EXP,     /* exp(a) */
  MHD_FUSED_TANH,    /* tanh(a) */
  MHD_FUSED_SIGMOID, /* 1 / (1 + exp(-a)) */
  MHD_FUSED_NUM_OPS
} mhd_fused_op_t;

/* One step. An operand is a register (>= 0, written before this step) or -1 for its scalar. A
 * unary op reads `a` only. */
typedef struct mhd_fused_step_t {
  int32_t op; /* mhd_fused_op_t */
  int32_t a, b;
  float scalar_a, scalar_b;
  float alpha; /* of ADD and SUB */
} mhd_fused_step_t;

typedef struct mhd_fused_program_t {
  uint32_t struct_size; /* sizeof(mhd_fused_program_t) */
  int32_t num_inputs;
  int32_t num_steps;
  int32_t num_outputs;
  const mhd_fused_step_t* steps;
  const int32_t* output_regs; /* num_outputs registers */
} mhd_fused_program_t;

/* Device memory as the runtime hands it to kernels: an opaque handle plus a byte offset. */
typedef struct mhd_fused_buffer_t {
  void* handle;
  uint64_t byte_offset;
} mhd_fused_buffer_t;

/* Checks the program and the buffers on the host, counts one launch on `device` and queues the
 * whole program as ONE task on `stream` (NULL: the device's default queue). The program and the
 * buffer list are copied: they may be freed when this returns; the buffers stay alive until the
 * task has run. Returns 0, or -1 with a one-line reason in `error` (truncated to
 * `error_capacity`; `error` may be NULL). Errors of the task itself are reported by the next
 * synchronisation of the stream, as for every kernel. */
MHD_FUSED_API int32_t mhd_fused_launch(int32_t device, void* stream, const mhd_fused_program_t* program,
                                       const mhd_fused_buffer_t* inputs, const mhd_fused_buffer_t* outputs,
                                       int64_t numel, char* error, size_t error_capacity);

/* How many fused programs were launched on `device` since the plugin loaded; -1 for no such device.
 * The same number is the device properties' "fused_launches". */
MHD_FUSED_API int64_t mhd_fused_launch_count(int32_t device);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MY_HARDWARE_DEVICE_FUSED_H_ */
