// DynamicAllocator: a model of a buffer type's address space.
//
// It hands out aligned offsets the way a buffer allocator would, without
// touching memory: address-sorted free blocks per chunk, best fit among the
// free blocks inside a chunk's high-water mark, else the chunk tail that
// grows its chunk least, else a new chunk; freeing merges neighbours. Each
// chunk is at most the type's max buffer size, so a set of tensors larger
// than one allocation spills into further chunks (several backing buffers).
// The high-water mark of each chunk is the buffer size a "measure" pass
// reports. This is ggml's online allocator; the graph allocator uses it as
// one of its planning strategies and to check a plan fits.
#ifndef FERRY_ALLOC_DYNAMIC_ALLOCATOR_H_
#define FERRY_ALLOC_DYNAMIC_ALLOCATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ferry {

// An offset in a chunk of a modelled address space.
struct DynamicAddress {
  int chunk = 0;
  int64_t offset = 0;

  friend bool operator==(const DynamicAddress&,
                         const DynamicAddress&) = default;
};

// Thread-compatible.
class DynamicAllocator {
 public:
  // `alignment` is a power of two; `max_size` caps every chunk (>= alignment).
  // `max_chunks` caps how many chunks may be opened.
  DynamicAllocator(int64_t alignment, int64_t max_size,
                   int max_chunks = 1 << 20);

  // Returns the address of `size` bytes (rounded up to the alignment; at least
  // one alignment unit). InvalidArgumentError when the rounded size exceeds
  // max_size, ResourceExhaustedError when max_chunks would be exceeded.
  absl::StatusOr<DynamicAddress> Allocate(int64_t size);

  // Returns `size` bytes at `address` (as passed to and returned by
  // Allocate) to the free list, merging with free neighbours. Freeing memory
  // that is not allocated is a broken invariant (checked).
  void Free(DynamicAddress address, int64_t size);

  // Forgets every allocation and chunk.
  void Reset();

  int64_t alignment() const { return alignment_; }
  int64_t max_size() const { return max_size_; }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  // Highest byte ever used in `chunk` (the buffer size it needs).
  int64_t high_water(int chunk) const;
  // Sum of high_water over chunks.
  int64_t total_high_water() const;
  // Bytes currently allocated.
  int64_t allocated_bytes() const { return allocated_; }
  // Free blocks of `chunk`, address-sorted; the last one may be the tail
  // that reaches max_size (for tests).
  struct FreeBlock {
    int64_t offset;
    int64_t size;
  };
  const std::vector<FreeBlock>& free_blocks(int chunk) const;

  // Rounds `size` as Allocate does.
  int64_t RoundSize(int64_t size) const;

 private:
  // Free blocks cover [0, max_size) minus allocations.
  struct Chunk {
    std::vector<FreeBlock> free;
    int64_t high_water = 0;
  };

  int64_t alignment_;
  int64_t max_size_;
  int max_chunks_;
  int64_t allocated_ = 0;
  std::vector<Chunk> chunks_;
};

}  // namespace ferry

#endif  // FERRY_ALLOC_DYNAMIC_ALLOCATOR_H_
