// Test cases for the CUDA kernels, written once and run by two executors:
// host_emulation_test (the kernels' math emulated on the host, runs
// everywhere) and cuda_kernels_test (Launch on a GPU, requires-gpu). Each
// case builds a small graph with filled inputs; the harness computes it
// with the reference evaluator and with the executor and compares.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_KERNEL_TEST_CASES_H_
#define FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_KERNEL_TEST_CASES_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"

namespace ferry {
namespace cuda_kernels_internal {

struct KernelCase {
  std::string name;  // Unique, e.g. "mul_mat/f16/3".
  // NMSE bound against the reference; 0 asks for equal values.
  double tolerance = 0.0;
  // Builds the graph in `ctx`, gives it host data (Context::AllocateHostData)
  // and fills its inputs; returns the output node. In-place cases set the
  // output's data to its src[0]'s.
  std::function<absl::StatusOr<Tensor*>(Context& ctx)> build;
  // When set, checks the output's values (logical order) instead of the
  // reference (for results the reference refuses: out-of-range get_rows ids).
  std::function<void(const std::vector<float>& got)> check;
  bool in_place = false;
};

// Returns every case: each op the CPU kernels support, with each dtype
// they accept, broadcasting, strided, permuted and transposed sources,
// in place where OpCanRunInPlace, and the edge cases (k = 0, overlapping
// rows, NaN rows).
std::vector<KernelCase> AllKernelCases();

// Computes every node of `graph`, in order, in place of the reference.
// Node data are host pointers; the executor may move them to a device and
// back, but must leave every tensor's `data` as it found it.
using RunGraphFn = std::function<absl::Status(const Graph& graph)>;

// Builds `test_case`, computes its output with the reference (restoring
// the inputs afterwards, for in-place cases), poisons the results, runs
// `run` and expects the output to match (gtest expectations).
void ExpectCaseMatches(const KernelCase& test_case, const RunGraphFn& run);

}  // namespace cuda_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_KERNEL_TEST_CASES_H_
