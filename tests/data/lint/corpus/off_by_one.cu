// Mutation OFF_BY_ONE of the evidence corpus (see kernels.cuh).
#define GPUEMU_MUT_OFF_BY_ONE
#include "kernels.cuh"
