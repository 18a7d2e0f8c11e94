// Mutation SPILLS of the evidence corpus (see kernels.cuh).
#define GPUEMU_MUT_SPILLS
#include "kernels.cuh"
