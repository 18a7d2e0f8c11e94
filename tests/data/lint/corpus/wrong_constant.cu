// Mutation WRONG_CONSTANT of the evidence corpus (see kernels.cuh).
#define GPUEMU_MUT_WRONG_CONSTANT
#include "kernels.cuh"
