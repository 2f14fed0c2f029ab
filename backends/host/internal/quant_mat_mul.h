// mul_mat with a block-quantized weight for the CPU backend, computed as
// ggml does: each row of the f32 activations b is rounded once to the
// weight type's 8-bit block format (quant::VecDotActivationType), and each
// output is one quant::VecDot of a weight row with an activation row:
//
//   dst[j][i] = vec_dot(a row i, quantize(b row j))
//
// From kMinGemmTokens tokens on (prompts), weights without fast tiles
// (any type on a CPU without AVX2: DefaultMinGemmTokens) are
// instead dequantized to f32 a run of rows at a time into scratch and
// multiplied by the f32 activations with the f32 GEMM of mat_mul.h, which
// reuses each loaded value across a tile of tokens as the one-row vec_dot
// kernels cannot (q4_1, one thread, 1536 x 576 and 576 x 1536: 0.49x and
// 0.58x of the vec_dot path's time at 128 tokens, 0.65x and 0.69x at 64).
// Its products are the exact f32 ones on the stored weights.
// Threads claim runs of weight rows.
//
// Below that, threads split the work in one of two ways, both without
// sharing scratch or waiting for each other:
//   * tokens (n >= kMinTokenSplitRows * nth): each thread takes runs of b's
//     rows, quantizes just those and multiplies them by every weight row, so
//     no activation is quantized twice and the weights (shared read-only)
//     stay in the shared cache;
//   * weight rows (fewer tokens, decode): each thread quantizes all n rows
//     (n is small) and takes runs of the weight's rows, so that two threads
//     split a one-token GEMV evenly. A caller whose threads can wait for
//     each other quantizes the rows once instead, split between its threads
//     (SharesQuantizedB, quantized_b): at 32 tokens a thread's copy of every
//     row had been 4% of SmolLM2's batched decode.
// Runs are claimed from MatMulArgs-style counters when one is given (a
// thread the OS runs less does less), else fixed equal shares.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_QUANT_MAT_MUL_H_
#define FERRY_BACKENDS_HOST_INTERNAL_QUANT_MAT_MUL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "ferry/quant/quant_type.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry {
namespace cpu_internal {

// Fewest b rows per thread for which threads split tokens instead of weight
// rows.
inline constexpr int64_t kMinTokenSplitRows = 4;

// Fewest b rows for which the weight is dequantized for the f32 GEMM, for
// types whose tiles do not beat it (DefaultMinGemmTokens).
inline constexpr int64_t kMinGemmTokens = 64;

// QuantMatMulArgs::min_gemm_tokens that picks DefaultMinGemmTokens.
inline constexpr int64_t kAutoGemmTokens = 0;

// The fewest tokens for which `type`'s weights go through the dequantized
// GEMM: never for the types the group layout takes (q4_0, q4_1, q5_0, q5_1,
// q8_0, q2_K..q6_K, iq4_nl, iq4_xs) where their AVX2 tiles run (they
// take 0.54-0.84x of the GEMM's time at 64 tokens, 1536 x 576; q5_0 0.49x
// at 64, 0.67x at 128; q4_K and q6_K 576 x 1536 about 0.45x at 64 and 0.5-0.7x
// at 128; q2_K 0.48x at 64, 0.65x at 128; iq4 about equal to it), else
// kMinGemmTokens.
int64_t DefaultMinGemmTokens(quant::QuantType type);

// Operands of dst[j][i] = sum_l a[i][l] * b[j][l], i < m, j < n, l < k.
struct QuantMatMulArgs {
  quant::QuantType a_type = quant::QuantType::kQ4_0;  // Has a VecDot.
  const void* a = nullptr;  // m rows of k elements, a_row_bytes apart.
  int64_t a_row_bytes = 0;  // >= RowBytes(a_type, k), even.
  // a in the layout of quant_group_layout.h (a type it takes, m a multiple
  // of kGroupRows; a_row_bytes unused): tiles at every token count.
  bool a_grouped = false;
  const float* b = nullptr;  // n rows of k floats, ldb floats apart.
  int64_t ldb = 0;
  float* dst = nullptr;  // n rows of m floats, ldc floats apart.
  int64_t ldc = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;  // A multiple of 32.
  // Optional, as MatMulArgs::next_column: 0 when the first thread starts;
  // threads claim runs of work from it.
  std::atomic<int64_t>* next = nullptr;
  // Fewest b rows for the dequantized GEMM path; kAutoGemmTokens picks
  // DefaultMinGemmTokens (tests and benchmarks set it to compare the paths).
  int64_t min_gemm_tokens = kAutoGemmTokens;
  // Optional, where SharesQuantizedB(args, nth): b's n rows already
  // quantized by QuantizeB (all threads' shares, finished before any thread
  // calls QuantMatMul). QuantMatMul then reads these, not b.
  const std::byte* quantized_b = nullptr;
};

// Whether QuantMatMul takes weights of `type`.
bool QuantMatMulSupports(quant::QuantType type);

// Scratch bytes thread ith (of nth) needs for `args` (the same for every
// thread): room for the activation rows it quantizes at once.
size_t QuantMatMulScratchBytes(quant::QuantType a_type, int64_t m, int64_t n,
                               int64_t k, int nth,
                               int64_t min_gemm_tokens = kAutoGemmTokens);

// Whether QuantMatMul would have each of nth threads quantize all of b
// (the weight-row split, for few tokens): a caller that can make its
// threads wait for each other then quantizes b once instead, each thread
// QuantizeB-ing a share of its rows into QuantizedBBytes shared bytes, and
// passes them as quantized_b. Needs nth >= 2 and at least two rows a thread.
bool SharesQuantizedB(const QuantMatMulArgs& args, int nth);

// Bytes of b's n rows quantized for a weight of `a_type`.
size_t QuantizedBBytes(quant::QuantType a_type, int64_t n, int64_t k);

// Quantizes b's rows [begin, end) into row j's place at `quantized_b` (of
// QuantizedBBytes bytes).
void QuantizeB(const QuantMatMulArgs& args, int64_t begin, int64_t end,
               std::byte* quantized_b);

// Computes thread ith's share of dst (all nth calls together compute all
// of it) with the vec_dot kernels of `isa` (which this CPU must support;
// the GEMM path uses mat_mul.h's ActiveIsa),
// using the QuantMatMulScratchBytes bytes at `scratch` (64-byte aligned,
// this thread's own). Requires m, n >= 1. Does not read dst. Thread-safe
// for distinct scratch.
void QuantMatMul(const QuantMatMulArgs& args, int ith, int nth, void* scratch,
                 Isa isa);

// As above with the fastest kernels for a_type (quant::PreferredIsa).
void QuantMatMul(const QuantMatMulArgs& args, int ith, int nth, void* scratch);

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_QUANT_MAT_MUL_H_
