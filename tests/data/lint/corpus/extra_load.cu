// Mutation EXTRA_LOAD of the evidence corpus (see kernels.cuh).
#define GPUEMU_MUT_EXTRA_LOAD
#include "kernels.cuh"
