// AVX2 + FMA build of the nn row kernels (Note [nn ISA kernels] in nn_isa.h).
#pragma GCC target("avx2,fma,f16c")
#define TESSERA_NN_AVX2 1
#define TESSERA_NN_ISA_NS isa_avx2
#define TESSERA_NN_ISA_TABLE nn_isa_avx2
#define TESSERA_NN_ISA_NAME "avx2"
#include "nn_isa_kernels.inc"
