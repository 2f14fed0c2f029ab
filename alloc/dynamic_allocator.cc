#include "ferry/alloc/dynamic_allocator.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

DynamicAllocator::DynamicAllocator(int64_t alignment, int64_t max_size,
                                   int max_chunks)
    : alignment_(alignment),
      max_size_(max_size / alignment * alignment),
      max_chunks_(max_chunks) {
  FERRY_CHECK(alignment_ > 0 && (alignment_ & (alignment_ - 1)) == 0);
  FERRY_CHECK(max_size_ >= alignment_);
}

int64_t DynamicAllocator::RoundSize(int64_t size) const {
  if (size <= alignment_) return alignment_;
  if (size > max_size_) return size;  // Rejected by Allocate.
  return (size + alignment_ - 1) & ~(alignment_ - 1);
}

absl::StatusOr<DynamicAddress> DynamicAllocator::Allocate(int64_t size) {
  const int64_t want = RoundSize(size);
  if (want > max_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("allocation of ", size,
                     " bytes exceeds the maximum buffer size ", max_size_));
  }
  // Best fit among blocks that end below their chunk's high-water mark.
  int best_chunk = -1;
  size_t best_block = 0;
  int64_t best_size = std::numeric_limits<int64_t>::max();
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk& chunk = chunks_[c];
    for (size_t b = 0; b < chunk.free.size(); ++b) {
      const FreeBlock& fb = chunk.free[b];
      if (fb.offset + fb.size > chunk.high_water) continue;
      if (fb.size >= want && fb.size < best_size) {
        best_chunk = static_cast<int>(c);
        best_block = b;
        best_size = fb.size;
      }
    }
  }
  if (best_chunk < 0) {
    // The block reaching past the high-water mark that grows it least.
    int64_t best_growth = std::numeric_limits<int64_t>::max();
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const Chunk& chunk = chunks_[c];
      if (chunk.free.empty()) continue;
      const FreeBlock& fb = chunk.free.back();
      if (fb.offset + fb.size <= chunk.high_water || fb.size < want) continue;
      const int64_t growth =
          std::max<int64_t>(0, fb.offset + want - chunk.high_water);
      if (growth < best_growth) {
        best_growth = growth;
        best_chunk = static_cast<int>(c);
        best_block = chunk.free.size() - 1;
      }
    }
  }
  if (best_chunk < 0) {
    if (static_cast<int>(chunks_.size()) >= max_chunks_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("allocation of ", size, " bytes needs more than ",
                       max_chunks_, " chunks of ", max_size_, " bytes"));
    }
    chunks_.push_back(Chunk{.free = {{0, max_size_}}, .high_water = 0});
    best_chunk = static_cast<int>(chunks_.size()) - 1;
    best_block = 0;
  }
  Chunk& chunk = chunks_[static_cast<size_t>(best_chunk)];
  FreeBlock& fb = chunk.free[best_block];
  const DynamicAddress address{best_chunk, fb.offset};
  fb.offset += want;
  fb.size -= want;
  if (fb.size == 0) {
    chunk.free.erase(chunk.free.begin() + static_cast<ptrdiff_t>(best_block));
  }
  chunk.high_water = std::max(chunk.high_water, address.offset + want);
  allocated_ += want;
  return address;
}

void DynamicAllocator::Free(DynamicAddress address, int64_t size) {
  const int64_t n = RoundSize(size);
  FERRY_CHECK(address.chunk >= 0 && address.chunk < num_chunks());
  Chunk& chunk = chunks_[static_cast<size_t>(address.chunk)];
  auto& free = chunk.free;
  auto it = std::lower_bound(
      free.begin(), free.end(), address.offset,
      [](const FreeBlock& b, int64_t offset) { return b.offset < offset; });
  // Must not overlap the neighbours.
  FERRY_CHECK(it == free.end() || address.offset + n <= it->offset);
  FERRY_CHECK(it == free.begin() ||
              std::prev(it)->offset + std::prev(it)->size <= address.offset);
  const bool merge_prev =
      it != free.begin() &&
      std::prev(it)->offset + std::prev(it)->size == address.offset;
  const bool merge_next = it != free.end() && address.offset + n == it->offset;
  if (merge_prev && merge_next) {
    std::prev(it)->size += n + it->size;
    free.erase(it);
  } else if (merge_prev) {
    std::prev(it)->size += n;
  } else if (merge_next) {
    it->offset -= n;
    it->size += n;
  } else {
    free.insert(it, FreeBlock{address.offset, n});
  }
  allocated_ -= n;
}

void DynamicAllocator::Reset() {
  chunks_.clear();
  allocated_ = 0;
}

int64_t DynamicAllocator::high_water(int chunk) const {
  return chunks_[static_cast<size_t>(chunk)].high_water;
}

int64_t DynamicAllocator::total_high_water() const {
  int64_t total = 0;
  for (const Chunk& c : chunks_) total += c.high_water;
  return total;
}

const std::vector<DynamicAllocator::FreeBlock>& DynamicAllocator::free_blocks(
    int chunk) const {
  return chunks_[static_cast<size_t>(chunk)].free;
}

}  // namespace ferry
