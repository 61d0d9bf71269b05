// Baseline x86-64 build of the nn row kernels (Note [nn ISA kernels] in nn_isa.h).
#define TESSERA_NN_ISA_NS isa_default
#define TESSERA_NN_ISA_TABLE nn_isa_default
#define TESSERA_NN_ISA_NAME "default"
#include "nn_isa_kernels.inc"
