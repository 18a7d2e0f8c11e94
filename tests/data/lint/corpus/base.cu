// The unmutated corpus: the baseline of docs/lint-evidence.md.
#include "kernels.cuh"
