// The row kernels' code run on the block emulation, for its tests: the
// block reduction alone, and rms_norm/norm and soft_max rows (kernel_math.h's
// NormOp and SoftMaxOp, through RunRowThread as RowKernel runs them).
// Testonly.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_TESTING_BLOCK_REDUCE_TEST_KERNELS_H_
#define FERRY_BACKENDS_CUDA_KERNELS_TESTING_BLOCK_REDUCE_TEST_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace ferry::cuda_kernels_testing {

// BlockReduce of `values` (one per thread of `blocks` blocks of `threads`):
// each block's sum and max, as every one of its threads got them
// (Internal error if two threads of a block got different results).
absl::Status ReduceOnBlocks(int64_t blocks, int threads,
                            const std::vector<float>& values,
                            std::vector<float>* sums,
                            std::vector<float>* maxes);

// Rows of a row-major [rows][n] f32 matrix `x`, computed by NormOp (center:
// norm, else rms_norm) or SoftMaxOp on `blocks` blocks of `threads`
// threads, in place when `in_place`.
absl::Status NormRows(const std::vector<float>& x, int64_t n, bool center,
                      float eps, int64_t blocks, int threads, bool in_place,
                      std::vector<float>* out);
absl::Status SoftMaxRows(const std::vector<float>& x, int64_t n, float scale,
                         int64_t blocks, int threads, bool in_place,
                         std::vector<float>* out);

// A block whose odd warps skip a barrier (divergence): must be reported.
absl::Status DivergentBlock(int threads);

}  // namespace ferry::cuda_kernels_testing

#endif  // FERRY_BACKENDS_CUDA_KERNELS_TESTING_BLOCK_REDUCE_TEST_KERNELS_H_
