// The unmutated corpus: the baseline of evidence/lint/README.md.
#include "kernels.cuh"
