// Mutation MORE_REGISTERS of the evidence corpus (see kernels.cuh).
#define GPUEMU_MUT_MORE_REGISTERS
#include "kernels.cuh"
