#include <cstdint>
#include <mutex>
#include <vector>

#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/index_math.h"
#include "ferry/backends/cuda/kernels/internal/kernel_math.h"
#include "ferry/backends/cuda/kernels/testing/block_emulation.h"
#include "ferry/backends/cuda/kernels/testing/block_reduce_test_kernels.h"

namespace ferry::cuda_kernels_testing {
namespace {

namespace k = ::ferry::cuda_kernels_internal;

k::TensorDesc Matrix(float* data, int64_t n, int64_t rows) {
  k::TensorDesc t;
  t.data = data;
  t.type = k::ElemType::kF32;
  t.ne[0] = n;
  t.ne[1] = rows;
  t.nb[0] = sizeof(float);
  t.nb[1] = n * static_cast<int64_t>(sizeof(float));
  t.nb[2] = t.nb[3] = t.nb[1] * rows;
  return t;
}

template <typename Op>
absl::Status RunRows(const typename Op::Args& args, int64_t blocks,
                     int threads) {
  const int64_t rows = Op::Rows(args);
  return RunBlocks(
      blocks, threads,
      [&](const k::GridPosition& at, HostSync& sync, float* shared) {
        k::SyncBlock<HostSync> block{at.thread, at.threads, shared, &sync};
        k::RunRowThread<Op>(args, rows, at, block);
      });
}

}  // namespace

absl::Status ReduceOnBlocks(int64_t blocks, int threads,
                            const std::vector<float>& values,
                            std::vector<float>* sums,
                            std::vector<float>* maxes) {
  sums->assign(static_cast<size_t>(blocks), 0.0f);
  maxes->assign(static_cast<size_t>(blocks), 0.0f);
  std::mutex mu;
  bool disagree = false;
  std::vector<int> reported(static_cast<size_t>(blocks), 0);
  absl::Status status = RunBlocks(
      blocks, threads,
      [&](const k::GridPosition& at, HostSync& sync, float* shared) {
        k::SyncBlock<HostSync> block{at.thread, at.threads, shared, &sync};
        const float v =
            values[static_cast<size_t>(at.block * at.threads + at.thread)];
        const float sum = block.Sum(v);
        const float max = block.Max(v);
        std::lock_guard<std::mutex> lock(mu);
        const size_t b = static_cast<size_t>(at.block);
        if (reported[b]++ == 0) {
          (*sums)[b] = sum;
          (*maxes)[b] = max;
        } else if ((*sums)[b] != sum || (*maxes)[b] != max) {
          disagree = true;
        }
      });
  if (!status.ok()) return status;
  if (disagree) {
    return absl::InternalError("threads of a block got different results");
  }
  return absl::OkStatus();
}

absl::Status NormRows(const std::vector<float>& x, int64_t n, bool center,
                      float eps, int64_t blocks, int threads, bool in_place,
                      std::vector<float>* out) {
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  std::vector<float> input = x;
  out->assign(x.size(), 0.0f);
  k::NormArgs args;
  args.a = Matrix(input.data(), n, rows);
  args.dst = in_place ? args.a : Matrix(out->data(), n, rows);
  args.center = center;
  args.eps = eps;
  absl::Status status = RunRows<k::NormOp>(args, blocks, threads);
  if (in_place) *out = input;
  return status;
}

absl::Status SoftMaxRows(const std::vector<float>& x, int64_t n, float scale,
                         int64_t blocks, int threads, bool in_place,
                         std::vector<float>* out) {
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  std::vector<float> input = x;
  out->assign(x.size(), 0.0f);
  k::SoftMaxArgs args;
  args.a = Matrix(input.data(), n, rows);
  args.dst = in_place ? args.a : Matrix(out->data(), n, rows);
  args.scale = scale;
  absl::Status status = RunRows<k::SoftMaxOp>(args, blocks, threads);
  if (in_place) *out = input;
  return status;
}

absl::Status DivergentBlock(int threads) {
  return RunBlocks(
      1, threads,
      [&](const k::GridPosition& at, HostSync& sync, float* shared) {
        k::SyncBlock<HostSync> block{at.thread, at.threads, shared, &sync};
        if ((at.thread / 32) % 2 == 1) return;  // Skips it.
        (void)block.Sum(1.0f);
      });
}

}  // namespace ferry::cuda_kernels_testing
