#include "ferry/backends/cuda/internal/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ferry::cuda_internal {
namespace {

constexpr size_t kSmallRound = 512;
constexpr size_t kLargeThreshold = size_t{1} << 20;
constexpr size_t kLargeRound = size_t{2} << 20;

size_t RoundUp(size_t size, size_t to) { return (size + to - 1) / to * to; }

bool AllComplete(FenceList& fences) {
  fences.erase(std::remove_if(fences.begin(), fences.end(),
                              [](const std::shared_ptr<Fence>& f) {
                                return f == nullptr || f->IsComplete();
                              }),
               fences.end());
  return fences.empty();
}

}  // namespace

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, cached] : cache_) memory_->Free(cached.block.ptr);
  cache_.clear();
  if (live_blocks_ != 0) {
    std::fprintf(stderr,
                 "ferry: caching allocator destroyed with %lld blocks in use\n",
                 static_cast<long long>(live_blocks_));
  }
}

size_t CachingAllocator::RoundSize(size_t size) {
  if (size < kLargeThreshold)
    return RoundUp(std::max<size_t>(size, 1), kSmallRound);
  return RoundUp(size, kLargeRound);
}

bool CachingAllocator::Reusable(Cached& cached, uint64_t stream) {
  if (!AllComplete(cached.other_fences)) return false;
  if (stream != kNoStream && stream == cached.stream) return true;
  if (cached.own_fence != nullptr) {
    if (!cached.own_fence->IsComplete()) return false;
    cached.own_fence = nullptr;
  }
  return true;
}

absl::StatusOr<CachingAllocator::Block> CachingAllocator::Allocate(
    size_t size, uint64_t stream) {
  if (size == 0) {
    return absl::InvalidArgumentError("cannot allocate 0 bytes");
  }
  if (size > SIZE_MAX - kLargeRound) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes"));
  }
  const size_t rounded = RoundSize(size);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Best fit among blocks up to 2x the request that this stream may use.
    for (auto it = cache_.lower_bound(rounded);
         it != cache_.end() && it->first <= 2 * rounded; ++it) {
      if (!Reusable(it->second, stream)) continue;
      Block block = it->second.block;
      cache_.erase(it);
      stats_.cached_bytes -= block.size;
      stats_.allocated_bytes += block.size;
      ++stats_.hits;
      ++live_blocks_;
      return block;
    }
  }
  // The device's allocator, and the cache's release, outside the lock.
  absl::StatusOr<void*> ptr = memory_->Allocate(rounded);
  if (absl::IsResourceExhausted(ptr.status())) {
    std::vector<Block> idle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle = TakeIdleLocked();
    }
    if (Release(idle) > 0) {
      CountOomRetry();
      ptr = memory_->Allocate(rounded);
    }
  }
  if (absl::IsResourceExhausted(ptr.status()) && WaitAndReleaseCached() > 0) {
    CountOomRetry();
    ptr = memory_->Allocate(rounded);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!ptr.ok()) {
    return absl::Status(
        ptr.status().code(),
        absl::StrCat("allocating ", rounded, " bytes (", size, " requested; ",
                     stats_.allocated_bytes, " in use, ", stats_.cached_bytes,
                     " cached, not yet reusable): ", ptr.status().message()));
  }
  ++stats_.misses;
  ++live_blocks_;
  stats_.allocated_bytes += rounded;
  UpdatePeak();
  return Block{*ptr, rounded};
}

void CachingAllocator::CountOomRetry() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.oom_retries;
}

void CachingAllocator::Free(Block block, uint64_t stream,
                            std::shared_ptr<Fence> own_fence,
                            FenceList other_fences) {
  if (block.ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  --live_blocks_;
  stats_.allocated_bytes -= block.size;
  stats_.cached_bytes += block.size;
  cache_.emplace(block.size, Cached{block, stream, std::move(own_fence),
                                    std::move(other_fences)});
}

size_t CachingAllocator::ReleaseIdle() {
  std::vector<Block> idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle = TakeIdleLocked();
  }
  return Release(idle);
}

std::vector<CachingAllocator::Block> CachingAllocator::TakeIdleLocked() {
  std::vector<Block> idle;
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (!Reusable(it->second, kNoStream)) {
      ++it;
      continue;
    }
    idle.push_back(it->second.block);
    stats_.cached_bytes -= it->second.block.size;
    it = cache_.erase(it);
  }
  return idle;
}

size_t CachingAllocator::Release(const std::vector<Block>& blocks) {
  size_t released = 0;
  for (const Block& block : blocks) {
    memory_->Free(block.ptr);
    released += block.size;
  }
  if (!blocks.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.releases += static_cast<int64_t>(blocks.size());
  }
  return released;
}

size_t CachingAllocator::WaitAndReleaseCached() {
  // Take every cached block out while waiting, so nobody hands one out
  // meanwhile; those that cannot be waited for go back.
  std::vector<Cached> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, cached] : cache_) taken.push_back(std::move(cached));
    for (const Cached& cached : taken) {
      stats_.cached_bytes -= cached.block.size;
    }
    cache_.clear();
  }
  std::vector<Block> done;
  std::vector<Cached> keep;
  for (Cached& cached : taken) {
    bool waited = true;
    for (const std::shared_ptr<Fence>& fence : cached.other_fences) {
      if (fence != nullptr && !fence->Wait()) waited = false;
    }
    if (cached.own_fence != nullptr && !cached.own_fence->Wait()) {
      waited = false;
    }
    if (waited) {
      done.push_back(cached.block);
    } else {
      keep.push_back(std::move(cached));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Cached& cached : keep) {
      stats_.cached_bytes += cached.block.size;
      cache_.emplace(cached.block.size, std::move(cached));
    }
  }
  return Release(done);
}

void CachingAllocator::UpdatePeak() {
  stats_.peak_bytes =
      std::max(stats_.peak_bytes, stats_.allocated_bytes + stats_.cached_bytes);
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace ferry::cuda_internal
