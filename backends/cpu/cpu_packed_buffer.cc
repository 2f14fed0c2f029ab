#include "ferry/backends/cpu/cpu_packed_buffer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host_buffer.h"

namespace ferry {
namespace {

using cpu_internal::PackedLayout;
using cpu_internal::QuantGroupLayout;

// The layout of a tensor StoredPacked accepts: groups of rows for block
// types (QuantGroupLayout::Packable's), panels for the others.
class LayoutOf {
 public:
  explicit LayoutOf(const Tensor& tensor)
      : quant_(IsQuantized(tensor.dtype)),
        panels_(tensor.dtype, tensor.ne),
        groups_(tensor.dtype, tensor.ne) {}

  size_t PackedBytes() const {
    return quant_ ? groups_.bytes() : panels_.PackedBytes();
  }
  void Pack(const void* src, size_t offset, size_t size, void* packed) const {
    quant_ ? groups_.Pack(src, offset, size, packed)
           : panels_.Pack(src, offset, size, packed);
  }
  void Unpack(const void* packed, size_t offset, size_t size, void* dst) const {
    quant_ ? groups_.Unpack(packed, offset, size, dst)
           : panels_.Unpack(packed, offset, size, dst);
  }

 private:
  bool quant_;
  PackedLayout panels_;
  QuantGroupLayout groups_;
};

absl::Status RefuseView(const Tensor& tensor, absl::string_view what) {
  return absl::UnimplementedError(
      absl::StrCat("cpu_packed: cannot ", what, " '", tensor.name, "' ",
                   tensor.ShapeString(), ", a view into packed weight '",
                   tensor.view_src->name,
                   "' (its bytes are in panel or group order); read or write "
                   "the whole weight"));
}

}  // namespace

size_t CpuPackedBufferType::AllocSize(const Tensor& tensor) const {
  if (StoredPacked(tensor)) return LayoutOf(tensor).PackedBytes();
  return static_cast<size_t>(tensor.NumBytes());
}

absl::StatusOr<std::unique_ptr<Buffer>> CpuPackedBufferType::Allocate(
    size_t size) {
  void* base = AllocateHostMemory(size, alignment());
  if (base == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name(), ": cannot allocate ", size, " bytes"));
  }
  return std::unique_ptr<Buffer>(new CpuPackedBuffer(this, base, size));
}

CpuPackedBuffer::~CpuPackedBuffer() { std::free(base()); }

absl::Status CpuPackedBuffer::SetTensor(Tensor& tensor, const void* data,
                                        size_t offset, size_t size) {
  if (tensor.view_src != nullptr && StoredPacked(*tensor.view_src)) {
    return RefuseView(tensor, "write");
  }
  if (StoredPacked(tensor)) {
    LayoutOf(tensor).Pack(data, offset, size, tensor.data);
  } else {
    std::memmove(static_cast<char*>(tensor.data) + offset, data, size);
  }
  return absl::OkStatus();
}

absl::Status CpuPackedBuffer::GetTensor(const Tensor& tensor, void* data,
                                        size_t offset, size_t size) {
  if (tensor.view_src != nullptr && StoredPacked(*tensor.view_src)) {
    return RefuseView(tensor, "read");
  }
  if (StoredPacked(tensor)) {
    LayoutOf(tensor).Unpack(tensor.data, offset, size, data);
  } else {
    std::memmove(data, static_cast<const char*>(tensor.data) + offset, size);
  }
  return absl::OkStatus();
}

absl::Status CpuPackedBuffer::MemsetTensor(Tensor& tensor, uint8_t value,
                                           size_t offset, size_t size) {
  if (!StoredPacked(tensor)) {
    if (tensor.view_src != nullptr && StoredPacked(*tensor.view_src)) {
      return RefuseView(tensor, "fill");
    }
    std::memset(static_cast<char*>(tensor.data) + offset, value, size);
    return absl::OkStatus();
  }
  // Every byte gets the same value, so pack a run of them; in pieces, to
  // bound the staging memory.
  constexpr size_t kPiece = size_t{1} << 20;
  std::vector<uint8_t> bytes(std::min(size, kPiece), value);
  const LayoutOf layout(tensor);
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(kPiece, size - done);
    layout.Pack(bytes.data(), offset + done, n, tensor.data);
    done += n;
  }
  return absl::OkStatus();
}

absl::Status CpuPackedBuffer::Clear(uint8_t value) {
  std::memset(base(), value, size());
  return absl::OkStatus();
}

}  // namespace ferry
