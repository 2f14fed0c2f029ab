#include "ferry/backends/host/packed_state.h"

#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/backends/host/internal/quant_group_layout.h"

namespace ferry {

bool StoredPacked(const Tensor& tensor) {
  return tensor.view_src == nullptr && tensor.IsContiguous() &&
         (cpu_internal::PackedLayout::Packable(tensor.dtype, tensor.ne) ||
          cpu_internal::QuantGroupLayout::Packable(tensor.dtype, tensor.ne));
}

PackedState GetPackedState(const Tensor& tensor) {
  const Tensor& owner = tensor.view_src != nullptr ? *tensor.view_src : tensor;
  if (!HasPresetMemory(owner) || owner.buffer == nullptr ||
      dynamic_cast<const PackedHostBuffer*>(owner.buffer) == nullptr ||
      !StoredPacked(owner)) {
    return PackedState::kPlain;
  }
  return tensor.view_src != nullptr ? PackedState::kViewOfPacked
                                    : PackedState::kPacked;
}

}  // namespace ferry
