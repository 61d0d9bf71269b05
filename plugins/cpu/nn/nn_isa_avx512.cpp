// AVX-512 (F/BW/VL/DQ) build of the nn row kernels (Note [nn ISA kernels] in nn_isa.h).
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#define TESSERA_NN_AVX512 1
#define TESSERA_NN_ISA_NS isa_avx512
#define TESSERA_NN_ISA_TABLE nn_isa_avx512
#define TESSERA_NN_ISA_NAME "avx512"
#include "nn_isa_kernels.inc"
