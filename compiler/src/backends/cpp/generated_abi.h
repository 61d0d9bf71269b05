// The C interface between the host and a generated library (Note [Generated code ABI]).
//
// Note [Generated code ABI]
// Generated C++ includes no Tessera header beyond this interface, which the generator pastes into
// every source it writes (TESSERA_CODEGEN_ABI_TEXT), so host and generated code are compiled from
// the same text and cannot drift. The library exports one C function,
//   int tessera_generated_main(const tessera_generated_call_t* call);
// that runs the whole partition: fused loops, and the nodes it cannot generate (matmul, linear,
// conv, ...) through host->call_node. Structs start with their own size; the library refuses a
// call whose structs are smaller than the ones it was generated against. Bumping
// TESSERA_GENERATED_ABI_VERSION changes every cache key (the version is part of the hash).
#pragma once
#include <cstddef>
#include <cstdint>

#define TESSERA_GENERATED_ABI_VERSION 1

#define TESSERA_CODEGEN_ABI_DECLS                                                                     \
  extern "C" {                                                                                        \
  typedef struct tessera_generated_host {                                                            \
    size_t struct_size;                                                                              \
    void* ctx;                                                                                       \
    /* Scratch buffer `slot` of `bytes` bytes, 64-byte aligned; null on failure (message set). */    \
    void* (*alloc)(void* ctx, int32_t slot, int64_t bytes);                                          \
    /* Runs graph node `node` eagerly. inputs: the data of its tensor arguments, in order; the */   \
    /* host sets outputs[i] to the contiguous data of output i, alive until the call returns. */      \
    /* 0 on success, else message set. */                                                            \
    int (*call_node)(void* ctx, int32_t node, void* const* inputs, void** outputs);                   \
  } tessera_generated_host_t;                                                                        \
  typedef struct tessera_generated_call {                                                            \
    size_t struct_size;                                                                              \
    const tessera_generated_host_t* host;                                                            \
    void* const* inputs;    /* one per placeholder, signature order */                               \
    void* const* outputs;   /* one per generated output buffer */                                    \
    const int64_t* symbols; /* bound symbol values, in the generator's order */                      \
    int num_threads;        /* 0: the OpenMP default */                                              \
  } tessera_generated_call_t;                                                                        \
  int tessera_generated_main(const tessera_generated_call_t* call);                                  \
  }

#define TESSERA_CODEGEN_STRINGIFY_(...) #__VA_ARGS__
#define TESSERA_CODEGEN_STRINGIFY(...) TESSERA_CODEGEN_STRINGIFY_(__VA_ARGS__)
#define TESSERA_CODEGEN_ABI_TEXT TESSERA_CODEGEN_STRINGIFY(TESSERA_CODEGEN_ABI_DECLS)

TESSERA_CODEGEN_ABI_DECLS
