#include "ferry/graph/testing/in_place_ops.h"

#include "ferry/graph/ops.h"

namespace ferry::testing {

absl::Span<const InPlaceOpBuilder> InPlaceOpBuilders() {
  static constexpr InPlaceOpBuilder kBuilders[] = {
      {"add",
       [](Context& c, Tensor* a, Tensor* b, Tensor*) { return Add(c, a, b); }},
      {"sub",
       [](Context& c, Tensor* a, Tensor* b, Tensor*) { return Sub(c, a, b); }},
      {"mul",
       [](Context& c, Tensor* a, Tensor* b, Tensor*) { return Mul(c, a, b); }},
      {"div",
       [](Context& c, Tensor* a, Tensor* b, Tensor*) { return Div(c, a, b); }},
      {"scale", [](Context& c, Tensor* a, Tensor*,
                   Tensor*) { return Scale(c, a, 3.0f); }},
      {"silu",
       [](Context& c, Tensor* a, Tensor*, Tensor*) { return Silu(c, a); }},
      {"gelu",
       [](Context& c, Tensor* a, Tensor*, Tensor*) { return Gelu(c, a); }},
      {"relu",
       [](Context& c, Tensor* a, Tensor*, Tensor*) { return Relu(c, a); }},
      {"tanh",
       [](Context& c, Tensor* a, Tensor*, Tensor*) { return Tanh(c, a); }},
      {"rms_norm", [](Context& c, Tensor* a, Tensor*,
                      Tensor*) { return RmsNorm(c, a, 1e-5f); }},
      {"norm", [](Context& c, Tensor* a, Tensor*,
                  Tensor*) { return Norm(c, a, 1e-5f); }},
      {"soft_max", [](Context& c, Tensor* a, Tensor* b,
                      Tensor*) { return SoftMax(c, a, b, 0.5f); }},
      {"rope_normal",
       [](Context& c, Tensor* a, Tensor*, Tensor* pos) {
         return Rope(c, a, pos, 12, RopeMode::kNormal);
       }},
      {"rope_neox",
       [](Context& c, Tensor* a, Tensor*, Tensor* pos) {
         return Rope(c, a, pos, 16, RopeMode::kNeox);
       }},
  };
  return kBuilders;
}

}  // namespace ferry::testing
