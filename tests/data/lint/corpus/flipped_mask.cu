// Mutation FLIPPED_MASK of the evidence corpus (see kernels.cuh).
#define GPUEMU_MUT_FLIPPED_MASK
#include "kernels.cuh"
