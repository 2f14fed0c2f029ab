#include "ferry/backends/remote/staging_pool.h"

#include <algorithm>
#include <bit>

#include "ferry/runtime/status_macros.h"

namespace ferry::remote {
namespace {

constexpr size_t kMinSize = size_t{64} << 10;
constexpr size_t kMaxPooled = size_t{16} << 20;

}  // namespace

StagingPool::StagingPool(size_t max_kept_bytes)
    : kept_(std::make_shared<Kept>()) {
  kept_->max_bytes = max_kept_bytes;
}

absl::StatusOr<std::shared_ptr<Buffer>> StagingPool::Acquire(BufferType& type,
                                                             size_t size) {
  if (size > kMaxPooled) {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> once, type.Allocate(size));
    return std::shared_ptr<Buffer>(std::move(once));
  }
  const size_t rounded = std::bit_ceil(std::max(size, kMinSize));
  const std::pair<BufferType*, size_t> key(&type, rounded);
  std::unique_ptr<Buffer> buffer;
  {
    std::lock_guard<std::mutex> lock(kept_->mu);
    auto it = kept_->free.find(key);
    if (it != kept_->free.end() && !it->second.empty()) {
      buffer = std::move(it->second.back());
      it->second.pop_back();
      kept_->bytes -= rounded;
    }
  }
  if (buffer == nullptr) {
    FERRY_ASSIGN_OR_RETURN(buffer, type.Allocate(rounded));
  }
  std::weak_ptr<Kept> weak = kept_;
  return std::shared_ptr<Buffer>(
      buffer.release(), [weak, key](Buffer* released) {
        std::unique_ptr<Buffer> owned(released);
        std::shared_ptr<Kept> kept = weak.lock();
        if (kept == nullptr) return;
        std::lock_guard<std::mutex> lock(kept->mu);
        if (kept->bytes + key.second > kept->max_bytes) return;
        kept->bytes += key.second;
        kept->free[key].push_back(std::move(owned));
      });
}

size_t StagingPool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(kept_->mu);
  return kept_->bytes;
}

}  // namespace ferry::remote
