// One node builder per op that may run in place (OpCanRunInPlace), for the
// kernel tests of every backend: each builds its op from a and b (f32, same
// shape, rows of at least 16) and pos (i32 [a.ne[2]]). rope appears twice,
// normal and neox.
#ifndef FERRY_GRAPH_TESTING_IN_PLACE_OPS_H_
#define FERRY_GRAPH_TESTING_IN_PLACE_OPS_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/graph/context.h"
#include "ferry/graph/tensor.h"

namespace ferry::testing {

struct InPlaceOpBuilder {
  const char* name;
  absl::StatusOr<Tensor*> (*build)(Context& ctx, Tensor* a, Tensor* b,
                                   Tensor* pos);
};

absl::Span<const InPlaceOpBuilder> InPlaceOpBuilders();

}  // namespace ferry::testing

#endif  // FERRY_GRAPH_TESTING_IN_PLACE_OPS_H_
