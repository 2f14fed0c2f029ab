// The correspondence between graph dtypes (graph/dtype.h) and ggml's tensor
// types (quant_type.h): every dtype is a ggml type; ggml types that have no
// dtype (k-quants, i8, f64, ...) cannot be placed in a graph.
#ifndef FERRY_QUANT_QUANT_DTYPE_H_
#define FERRY_QUANT_QUANT_DTYPE_H_

#include "absl/status/statusor.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/quant_type.h"

namespace ferry::quant {

// The ggml type of `dtype` (same block geometry).
QuantType QuantTypeOf(DType dtype);

// The dtype of ggml type `type`, or Unimplemented naming it when graphs
// have no such dtype.
absl::StatusOr<DType> DTypeOf(QuantType type);

}  // namespace ferry::quant

#endif  // FERRY_QUANT_QUANT_DTYPE_H_
