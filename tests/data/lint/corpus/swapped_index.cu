// Mutation SWAPPED_INDEX of the evidence corpus (see kernels.cuh).
#define GPUEMU_MUT_SWAPPED_INDEX
#include "kernels.cuh"
