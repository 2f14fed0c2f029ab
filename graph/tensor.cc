#include "ferry/graph/tensor.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ferry {

int Tensor::NumSrc() const {
  for (int i = kMaxSrc; i > 0; --i) {
    if (src[i - 1] != nullptr) return i;
  }
  return 0;
}

int64_t Tensor::NumBytes() const {
  for (int i = 0; i < kMaxDims; ++i) {
    if (ne[i] <= 0) return 0;
  }
  const int64_t block_size = DTypeBlockSize(dtype);
  int64_t bytes = ElementSize();
  bytes += (ne[0] / block_size - 1) * nb[0];
  for (int i = 1; i < kMaxDims; ++i) bytes += (ne[i] - 1) * nb[i];
  return bytes;
}

bool Tensor::IsContiguous() const {
  if (ne[0] != DTypeBlockSize(dtype) && nb[0] != ElementSize()) return false;
  int64_t expected = RowBytes();
  for (int i = 1; i < kMaxDims; ++i) {
    if (ne[i] == 1) continue;
    if (nb[i] != expected) return false;
    expected *= ne[i];
  }
  return true;
}

bool Tensor::IsPermuted() const {
  return nb[0] > nb[1] || nb[1] > nb[2] || nb[2] > nb[3];
}

std::string Tensor::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(ne, ", "), "] ", DTypeName(dtype));
}

std::string Tensor::DebugString() const {
  return absl::StrCat(
      "'", name, "' ", OpName(op), " ", ShapeString(), " nb=[",
      absl::StrJoin(nb, ", "), "]",
      view_src != nullptr
          ? absl::StrCat(" view of '", view_src->name, "' +", view_offset)
          : "");
}

std::array<int64_t, kMaxDims> ContiguousStrides(
    DType dtype, const std::array<int64_t, kMaxDims>& ne) {
  std::array<int64_t, kMaxDims> nb;
  nb[0] = DTypeBlockBytes(dtype);
  nb[1] = nb[0] * (ne[0] / DTypeBlockSize(dtype));
  for (int i = 2; i < kMaxDims; ++i) nb[i] = nb[i - 1] * ne[i - 1];
  return nb;
}

bool SameShape(const Tensor& a, const Tensor& b) { return a.ne == b.ne; }

bool CanRepeat(const Tensor& small, const Tensor& big) {
  if (small.NumElements() == 0) return big.NumElements() == 0;
  for (int i = 0; i < kMaxDims; ++i) {
    if (small.ne[i] <= 0 || big.ne[i] % small.ne[i] != 0) return false;
  }
  return true;
}

}  // namespace ferry
