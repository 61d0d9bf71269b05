/* A compiler plugin in plain C (Note [Compiler plugin ABI]): it takes chains of elementwise float32
 * ops of one shape on the CPU and runs each chain as one loop over the elements ("one launch"),
 * computing every op in float like the eager kernels. Its extension "test.chain_launches" counts
 * the launches, so a test sees one launch per chain per call.
 *
 * Built a second time as chain_compiler_faulty (CHAIN_COMPILER_FAULTS defined), it misbehaves as the
 * environment variable TESSERA_TEST_CHAIN_FAULT says, read at each call, so tests see the host
 * refuse what a broken plugin does: "claim_placeholder" (get_capability puts node 0, a placeholder,
 * in a group), "null_executable" (compile returns no executable and an OK status), "fail_compile"
 * (compile fails), "wrong_results" (run adds 0.25 to every element it writes: the conformance kit's
 * graph suite must flag it). Its extension "test.chain_compiles" counts the calls of compile. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/plugin_abi.h"

static const tessera_host_api_t* g_host;
static uint64_t g_launches;
static uint64_t g_compiles;

static int fault(const char* which) {
#ifdef CHAIN_COMPILER_FAULTS
  const char* f = getenv("TESSERA_TEST_CHAIN_FAULT");
  return f && strcmp(f, which) == 0;
#else
  (void)which;
  return 0;
#endif
}

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_RELU, OP_NEG, OP_EXP, OP_TANH, OP_SIGMOID, OP_NONE };
static const char* const kTargets[] = {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "relu",
                                       "neg",        "exp",        "tanh",       "sigmoid"};

static int op_of(const char* target) {
  int i;
  for (i = 0; i < OP_NONE; ++i)
    if (strcmp(target, kTargets[i]) == 0) return i;
  return OP_NONE;
}

static int binary(int op) { return op <= OP_DIV; }

/* The number an argument holds, when it is a constant int or double. */
static int constant_number(const tessera_graph_t* g, int32_t node, int32_t arg, float* out) {
  tessera_value_t v;
  tessera_status_t s = g_host->graph->node_arg_constant(g, node, arg, &v);
  if (s) {
    g_host->status_free(s);
    return 0;
  }
  if (v.kind == TESSERA_VALUE_INT) *out = (float)v.u.i;
  else if (v.kind == TESSERA_VALUE_DOUBLE) *out = (float)v.u.d;
  else return 0;
  return 1;
}

static int same_type(const tessera_graph_t* g, int32_t a, int32_t b) {
  const tessera_graph_api_t* api = g_host->graph;
  int32_t rank = api->value_rank(g, a), d;
  if (api->value_dtype(g, a) != TESSERA_DTYPE_FLOAT32 || api->value_dtype(g, b) != TESSERA_DTYPE_FLOAT32) return 0;
  if (rank != api->value_rank(g, b)) return 0;
  for (d = 0; d < rank; ++d) {
    tessera_graph_size_t x, y;
    tessera_status_t s1, s2;
    x.struct_size = y.struct_size = sizeof(tessera_graph_size_t);
    s1 = api->value_size(g, a, d, &x);
    s2 = api->value_size(g, b, d, &y);
    if (s1 || s2) {
      g_host->status_free(s1);
      g_host->status_free(s2);
      return 0;
    }
    if (strcmp(x.expr, y.expr) != 0) return 0;
  }
  return 1;
}

/* A call node this plugin runs: a listed op whose tensor operands have the output's type. */
static int takes(const tessera_graph_t* g, int32_t node) {
  const tessera_graph_api_t* api = g_host->graph;
  int op, nargs, a, operands;
  float number;
  int32_t out;
  if (api->node_kind(g, node) != TESSERA_NODE_CALL || api->node_num_outputs(g, node) != 1) return 0;
  op = op_of(api->node_target(g, node));
  if (op == OP_NONE) return 0;
  out = api->node_output(g, node, 0);
  nargs = api->node_num_args(g, node);
  operands = binary(op) ? 2 : 1;
  if (nargs < operands) return 0;
  for (a = 0; a < nargs; ++a) {
    int kind = api->node_arg_kind(g, node, a);
    if (a >= operands) { /* alpha of add/sub */
      if (kind != TESSERA_ARG_CONSTANT || !constant_number(g, node, a, &number)) return 0;
    } else if (kind == TESSERA_ARG_TENSOR) {
      if (!same_type(g, api->node_arg_value(g, node, a, 0), out)) return 0;
    } else if (kind != TESSERA_ARG_CONSTANT || !constant_number(g, node, a, &number)) {
      return 0;
    }
  }
  return 1;
}

static tessera_status_t get_capability(void* self, const tessera_graph_t* g, const char* device, int32_t* out_group) {
  const tessera_graph_api_t* api = g_host->graph;
  int32_t n = api->node_count(g), i, group = 0, in_chain = 0;
  const int on_cpu = strncmp(device, "cpu", 3) == 0;
  (void)self;
  for (i = 0; i < n; ++i) {
    out_group[i] = -1;
    if (api->node_kind(g, i) != TESSERA_NODE_CALL) continue;
    if (on_cpu && takes(g, i)) {
      out_group[i] = group;
      in_chain = 1;
    } else if (in_chain) {
      ++group;
      in_chain = 0;
    }
  }
  if (fault("claim_placeholder") && n > 0) out_group[0] = 0;
  return NULL;
}

/* One op of a chain over registers (inputs first, then each node's output). */
typedef struct {
  int op;
  int32_t a, b; /* registers, or -1 for the scalar */
  float sa, sb, alpha;
  int32_t out;
} step_t;

typedef struct {
  int32_t num_inputs, num_outputs, num_steps, num_regs;
  int32_t* output_regs;
  step_t* steps;
} chain_t;

static tessera_status_t compile(void* self, const tessera_graph_t* g, const char* device, void** out_executable) {
  const tessera_graph_api_t* api = g_host->graph;
  int32_t values = api->value_count(g), n = api->node_count(g), i, k;
  int32_t* reg = (int32_t*)malloc(sizeof(int32_t) * (size_t)(values > 0 ? values : 1));
  chain_t* c = (chain_t*)calloc(1, sizeof(chain_t));
  (void)self;
  (void)device;
  __atomic_add_fetch(&g_compiles, 1, __ATOMIC_RELAXED);
  if (fault("fail_compile") || fault("null_executable")) {
    free(reg);
    free(c);
    if (fault("null_executable")) return NULL;
    return g_host->status_make(TESSERA_STATUS_INVALID_ARGUMENT, "chain_compiler: compile fails on request");
  }
  if (!reg || !c) {
    free(reg);
    free(c);
    return g_host->status_make(TESSERA_STATUS_OUT_OF_MEMORY, "chain_compiler: out of memory");
  }
  for (i = 0; i < values; ++i) reg[i] = -1;
  c->num_inputs = api->input_count(g);
  for (i = 0; i < c->num_inputs; ++i) {
    int32_t kind, value;
    const char* name;
    tessera_status_t s = api->input(g, i, &kind, &name, &value);
    if (s) return s;
    reg[value] = c->num_regs++;
  }
  c->steps = (step_t*)calloc((size_t)(n > 0 ? n : 1), sizeof(step_t));
  for (i = 0; i < n; ++i) {
    step_t* st;
    int operands;
    if (api->node_kind(g, i) != TESSERA_NODE_CALL) continue;
    if (!takes(g, i)) {
      free(reg);
      return g_host->status_make(TESSERA_STATUS_INVALID_ARGUMENT, "chain_compiler: a node it does not take");
    }
    st = &c->steps[c->num_steps++];
    st->op = op_of(api->node_target(g, i));
    st->a = st->b = -1;
    st->alpha = 1.0f;
    operands = binary(st->op) ? 2 : 1;
    for (k = 0; k < operands; ++k) {
      int32_t* r = k == 0 ? &st->a : &st->b;
      float* scalar = k == 0 ? &st->sa : &st->sb;
      if (api->node_arg_kind(g, i, k) == TESSERA_ARG_TENSOR) *r = reg[api->node_arg_value(g, i, k, 0)];
      else constant_number(g, i, k, scalar);
    }
    if ((st->op == OP_ADD || st->op == OP_SUB) && api->node_num_args(g, i) > 2) constant_number(g, i, 2, &st->alpha);
    st->out = c->num_regs++;
    reg[api->node_output(g, i, 0)] = st->out;
  }
  c->num_outputs = api->output_count(g);
  c->output_regs = (int32_t*)calloc((size_t)(c->num_outputs > 0 ? c->num_outputs : 1), sizeof(int32_t));
  for (i = 0; i < c->num_outputs; ++i) {
    const char* name;
    int32_t value;
    tessera_status_t s = api->output(g, i, &name, &value);
    if (s) return s;
    c->output_regs[i] = reg[value];
  }
  free(reg);
  *out_executable = c;
  return NULL;
}

static float apply(const step_t* st, float a, float b) {
  switch (st->op) {
    case OP_ADD: return a + st->alpha * b;
    case OP_SUB: return a - st->alpha * b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_RELU: return a > 0.0f ? a : 0.0f;
    case OP_NEG: return -a;
    case OP_EXP: return expf(a);
    case OP_TANH: return tanhf(a);
    default: return 1.0f / (1.0f + expf(-a));
  }
}

static tessera_status_t run(void* self, void* executable, const tessera_tensor_t* const* inputs, int32_t num_inputs,
                            const tessera_tensor_t* const* outputs, int32_t num_outputs, void* stream) {
  const chain_t* c = (const chain_t*)executable;
  int64_t numel = num_outputs > 0 ? outputs[0]->numel : 0, e;
  float* regs;
  const float skew = fault("wrong_results") ? 0.25f : 0.0f;
  int32_t i;
  (void)self;
  (void)stream;
  if (num_inputs != c->num_inputs || num_outputs != c->num_outputs)
    return g_host->status_make(TESSERA_STATUS_INVALID_ARGUMENT, "chain_compiler: wrong number of tensors");
  regs = (float*)malloc(sizeof(float) * (size_t)(c->num_regs > 0 ? c->num_regs : 1));
  if (!regs) return g_host->status_make(TESSERA_STATUS_OUT_OF_MEMORY, "chain_compiler: out of memory");
  for (e = 0; e < numel; ++e) {
    for (i = 0; i < num_inputs; ++i)
      regs[i] = ((const float*)((const char*)inputs[i]->data + inputs[i]->byte_offset))[e];
    for (i = 0; i < c->num_steps; ++i) {
      const step_t* st = &c->steps[i];
      regs[st->out] = apply(st, st->a >= 0 ? regs[st->a] : st->sa, st->b >= 0 ? regs[st->b] : st->sb);
    }
    for (i = 0; i < num_outputs; ++i)
      ((float*)((char*)outputs[i]->data + outputs[i]->byte_offset))[e] = regs[c->output_regs[i]] + skew;
  }
  free(regs);
  __atomic_fetch_add(&g_launches, 1, __ATOMIC_RELAXED);
  return NULL;
}

static void release(void* self, void* executable) {
  chain_t* c = (chain_t*)executable;
  (void)self;
  free(c->steps);
  free(c->output_regs);
  free(c);
}

/* A 1.2 table: it ends at `release`, so the host must not read the 1.3 compatibility slots
 * (Note [Compiled artifact compatibility]; CompiledProgramOfA12Plugin in test_compile_plugin.cpp). */
static const tessera_compiler_interface_t kCompiler = {
    .struct_size = offsetof(tessera_compiler_interface_t, compatibility_info),
    .reserved_ = 0,
    .self = NULL,
    .get_capability = get_capability,
    .compile = compile,
    .run = run,
    .release = release,
};

static const tessera_compiler_interface_t* compiler_table(void) { return &kCompiler; }

typedef uint64_t (*launches_fn_t)(void);
static uint64_t launches(void) { return __atomic_load_n(&g_launches, __ATOMIC_RELAXED); }
static uint64_t compiles(void) { return __atomic_load_n(&g_compiles, __ATOMIC_RELAXED); }

static tessera_proc_t get_proc_address(void* self, const char* name) {
  (void)self;
  if (strcmp(name, TESSERA_EXT_COMPILER) == 0) return (tessera_proc_t)(tessera_ext_compiler_fn_t)compiler_table;
  if (strcmp(name, "test.chain_launches") == 0) return (tessera_proc_t)(launches_fn_t)launches;
  if (strcmp(name, "test.chain_compiles") == 0) return (tessera_proc_t)(launches_fn_t)compiles;
  return NULL;
}

static const tessera_plugin_t kPlugin = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "chain_compiler",
    .version = "0.1.0",
    .features = 0,
    .self = NULL,
    .device = NULL,
    .shutdown = NULL,
    .get_proc_address = get_proc_address,
};

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_minor;
  if (host_abi_major != TESSERA_ABI_MAJOR)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH, "chain_compiler: built for ABI major 1");
  if (!TESSERA_ABI_HAS_FIELD(host, tessera_host_api_t, graph) || !host->graph)
    return host->status_make(TESSERA_STATUS_ABI_MISMATCH,
                             "chain_compiler: the runtime has no graph ABI (needs plugin ABI 1.2 or later)");
  g_host = host;
  *out_plugin = &kPlugin;
  return NULL;
}
