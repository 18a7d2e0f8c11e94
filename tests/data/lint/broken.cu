// Does not compile: tests/cpp/lint_test.cpp checks that nvcc's error comes back as one line.
extern "C" __global__ void broken(float* y) { y[threadIdx.x] = undefined_name; }
