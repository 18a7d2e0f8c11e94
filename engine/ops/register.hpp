// The table of built-in op families. Each family lives in its own <family>_ops.cpp and adds its
// ops (reference, controls, known-buggy kernels) to the registry.
#pragma once

#include "gpuemu/engine/op.hpp"

namespace gpuemu::ops {

void register_elementwise_ops(BuiltinRegistry& r);  // relu ... rsqrt, add, mul, swiglu, geglu
void register_reduction_ops(BuiltinRegistry& r);    // sum mean amax argmax logsumexp l2norm cumsum
void register_softmax_ops(BuiltinRegistry& r);      // softmax log_softmax (and their backward)
void register_norm_ops(BuiltinRegistry& r);         // layer_norm rms_norm group_norm batch_norm
void register_norm_backward_ops(BuiltinRegistry& r);  // rms_norm_backward layer_norm_backward
void register_elementwise_backward_ops(BuiltinRegistry& r);  // silu_backward swiglu_backward gelu_backward
void register_loss_ops(BuiltinRegistry& r);         // cross_entropy (cross_entropy_backward) embedding (embedding_backward)
void register_gemm_ops(BuiltinRegistry& r);         // matmul bmm linear (matmul_backward linear_backward)
void register_attention_ops(BuiltinRegistry& r);    // flash_attention decode_attention
void register_rope_ops(BuiltinRegistry& r);         // rope (rope_backward)
void register_conv_ops(BuiltinRegistry& r);         // conv1d conv2d
void register_quant_ops(BuiltinRegistry& r);        // fp8_quantize scaled_fp8_matmul

inline void register_all_builtin_ops(BuiltinRegistry& r) {
  register_elementwise_ops(r);
  register_reduction_ops(r);
  register_softmax_ops(r);
  register_norm_ops(r);
  register_norm_backward_ops(r);
  register_elementwise_backward_ops(r);
  register_loss_ops(r);
  register_gemm_ops(r);
  register_attention_ops(r);
  register_rope_ops(r);
  register_conv_ops(r);
  register_quant_ops(r);
}

}  // namespace gpuemu::ops
