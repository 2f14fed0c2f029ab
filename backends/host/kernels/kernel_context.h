// KernelContext: what the CPU op kernels get besides the node and their
// thread index: per-thread scratch memory and a shared work counter.
#ifndef FERRY_BACKENDS_HOST_KERNELS_KERNEL_CONTEXT_H_
#define FERRY_BACKENDS_HOST_KERNELS_KERNEL_CONTEXT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ferry {
namespace cpu_kernels_internal {
class SpinBarrier;
}  // namespace cpu_kernels_internal
namespace cpu_kernels {

// Alignment of the scratch block and of each thread's slice of it.
inline constexpr size_t kScratchAlignment = 64;

// `bytes` rounded up to a multiple of kScratchAlignment (a slice's size;
// aligned_alloc's sizes).
inline constexpr size_t RoundUpToScratchAlignment(size_t bytes) {
  return (bytes + kScratchAlignment - 1) / kScratchAlignment *
         kScratchAlignment;
}

// Scratch shared by the nth threads computing one node. The caller provides
// at least ScratchBytes(node, nth) bytes (kernels.h), aligned to
// kScratchAlignment; thread ith writes only its own part of it, whole cache
// lines apart from the others' (most kernels: slice ith of nth equal
// slices), except in a region the threads fill before a wait at `barrier`
// (below). Contents are unspecified on entry and may be clobbered. Does not
// own `scratch`.
//
// `work_counter`, when set, is one counter all nth threads of this node
// share, 0 when the first of them starts it: kernels may hand out work from
// it (mul_mat does, so that a thread the OS runs less does less). Null
// means each thread must compute a fixed share.
//
// `barrier`, when set, is one barrier of all nth threads of this node: a
// kernel may split a phase of its work between them and wait there before
// the next (mul_mat quantizes its activations so, into a region at the
// start of the scratch that all threads share, its slices after it). Every
// thread must then wait there the same number of times. Null means threads
// must not wait for each other.
// Thread-compatible; the kernels only read it (and use the counter and the
// barrier).
struct KernelContext {
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  std::atomic<int64_t>* work_counter = nullptr;
  cpu_kernels_internal::SpinBarrier* barrier = nullptr;
};

}  // namespace cpu_kernels
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_KERNEL_CONTEXT_H_
