// KernelContext: what the CPU op kernels get besides the node and their
// thread index: per-thread scratch memory.
#ifndef FERRY_BACKENDS_CPU_KERNELS_KERNEL_CONTEXT_H_
#define FERRY_BACKENDS_CPU_KERNELS_KERNEL_CONTEXT_H_

#include <cstddef>

namespace ferry {
namespace cpu_kernels {

// Alignment of the scratch block and of each thread's slice of it.
inline constexpr size_t kScratchAlignment = 64;

// Scratch shared by the nth threads computing one node. The caller provides
// at least ScratchBytes(node, nth) bytes (kernels.h), aligned to
// kScratchAlignment; thread ith uses only slice ith of it (slices are
// ScratchBytes(node, nth) / nth bytes, a multiple of kScratchAlignment, so
// threads never share a cache line). Contents are unspecified on entry and
// may be clobbered. Does not own `scratch`.
// Thread-compatible; the kernels only read it.
struct KernelContext {
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
};

}  // namespace cpu_kernels
}  // namespace ferry

#endif  // FERRY_BACKENDS_CPU_KERNELS_KERNEL_CONTEXT_H_
