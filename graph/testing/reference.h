// A scalar reference evaluator for ferry graphs, plus tensor fill/read
// helpers, for tests. Backends and the conformance suite compare against it.
//
// EvaluateReference computes each node in double precision, element by
// element in the most direct way, reading and writing host memory through
// each tensor's `data` with its strides (so views, permutes and broadcasting
// are exercised exactly as kernels see them). It is slow by design.
//
// Block-quantized tensors (mul_mat's and get_rows' a) need contiguous rows:
// the evaluator computes on their dequantized values (in f32 b is used as
// it is, without the 8-bit rounding of activations that quantized kernels
// do); FillRandom and WriteTensor quantize each row with the reference
// quantizer (quant/quantize.h) and ReadTensor dequantizes.
#ifndef FERRY_GRAPH_TESTING_REFERENCE_H_
#define FERRY_GRAPH_TESTING_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"

namespace ferry::testing {

// Computes every node of `graph` in order into its `data`, which must be
// host memory (e.g. from Context::AllocateHostData). Leafs must have data.
// A view or cpy node whose data is null gets view_src->data + view_offset.
// Each node's result is computed completely before it is stored, so nodes
// placed in place over a source are handled. Returns FailedPreconditionError
// for missing data, OutOfRangeError for get_rows ids out of range and
// UnimplementedError for an op it does not know.
absl::Status EvaluateReference(const Graph& graph);

// Evaluates just `node` (its sources must already hold their values).
absl::Status EvaluateReferenceNode(Tensor& node);

// Fills `t` (host data, any strides) with values drawn uniformly from
// [lo, hi) by a generator seeded with `seed`: the same seed gives the same
// values on every machine. i32 tensors get integers in [lo, hi).
absl::Status FillRandom(Tensor& t, uint64_t seed, float lo = -1.0f,
                        float hi = 1.0f);

// Returns t's elements converted to float, in logical order (i0 fastest,
// then i1, i2, i3), following its strides.
absl::StatusOr<std::vector<float>> ReadTensor(const Tensor& t);

// Stores `values` (logical order, converted to t's dtype) into t's data;
// values.size() must equal t.NumElements().
absl::Status WriteTensor(Tensor& t, absl::Span<const float> values);

// Returns the normalized mean squared error sum((a - e)^2) / sum(e^2), the
// metric ggml's backend tests use (0 when both are all zero). NaN when the
// sizes differ or any value is NaN.
double Nmse(absl::Span<const float> expected, absl::Span<const float> actual);

}  // namespace ferry::testing

#endif  // FERRY_GRAPH_TESTING_REFERENCE_H_
