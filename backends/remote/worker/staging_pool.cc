#include "ferry/backends/remote/worker/staging_pool.h"

#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {
namespace {

constexpr size_t kMinSize = size_t{64} << 10;
constexpr size_t kMaxPooled = size_t{16} << 20;

}  // namespace

StagingPool::StagingPool(size_t max_kept_bytes, size_t max_in_use_bytes)
    : kept_(std::make_shared<Kept>()) {
  kept_->max_bytes = max_kept_bytes;
  kept_->max_in_use = max_in_use_bytes;
}

absl::StatusOr<std::shared_ptr<Buffer>> StagingPool::Acquire(BufferType& type,
                                                             size_t size) {
  const size_t rounded =
      size > kMaxPooled ? size : std::bit_ceil(std::max(size, kMinSize));
  {
    // Counted before allocating: never more than the limit at once.
    std::lock_guard<std::mutex> lock(kept_->mu);
    if (rounded > kept_->max_in_use - kept_->in_use) {
      return absl::ResourceExhaustedError(
          absl::StrCat("staging ", size, " bytes: ", kept_->in_use, " of ",
                       kept_->max_in_use, " staging bytes are in use"));
    }
    kept_->in_use += rounded;
  }
  std::weak_ptr<Kept> weak = kept_;
  auto unuse = [weak, rounded] {
    if (std::shared_ptr<Kept> kept = weak.lock()) {
      std::lock_guard<std::mutex> lock(kept->mu);
      kept->in_use -= rounded;
    }
  };
  if (size > kMaxPooled) {
    absl::StatusOr<std::unique_ptr<Buffer>> once = type.Allocate(size);
    if (!once.ok()) {
      unuse();
      return once.status();
    }
    return std::shared_ptr<Buffer>(once->release(), [unuse](Buffer* released) {
      std::unique_ptr<Buffer> owned(released);
      unuse();
    });
  }
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
    absl::StatusOr<std::unique_ptr<Buffer>> made = type.Allocate(rounded);
    if (!made.ok()) {
      unuse();
      return made.status();
    }
    buffer = *std::move(made);
  }
  return std::shared_ptr<Buffer>(
      buffer.release(), [weak, key](Buffer* released) {
        std::unique_ptr<Buffer> owned(released);
        std::shared_ptr<Kept> kept = weak.lock();
        if (kept == nullptr) return;
        std::lock_guard<std::mutex> lock(kept->mu);
        kept->in_use -= key.second;
        if (kept->bytes + key.second > kept->max_bytes) return;
        kept->bytes += key.second;
        kept->free[key].push_back(std::move(owned));
      });
}

size_t StagingPool::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(kept_->mu);
  return kept_->in_use;
}

size_t StagingPool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(kept_->mu);
  return kept_->bytes;
}

}  // namespace ferry::remote
