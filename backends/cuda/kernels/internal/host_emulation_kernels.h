// A test double for internal/device_kernels.h: runs the kernels' own
// per-element and per-row code (kernel_math.h) serially on host memory, one
// function per launcher. For tests on machines without a GPU.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_HOST_EMULATION_KERNELS_H_
#define FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_HOST_EMULATION_KERNELS_H_

#include "ferry/backends/cuda/kernels/internal/desc.h"

namespace ferry {
namespace cuda_kernels_internal {

// Each computes what the matching Launch* function enqueues; pointers in
// the arguments are host addresses.
void EmulateBinary(const BinaryArgs& args);
void EmulateUnary(const UnaryArgs& args);
void EmulateNorm(const NormArgs& args);
void EmulateSoftMax(const SoftMaxArgs& args);
void EmulateRope(const RopeArgs& args);
void EmulateGetRows(const GetRowsArgs& args);
void EmulateSetRows(const SetRowsArgs& args);
void EmulateCopy(const CopyArgs& args);
void EmulateConcat(const ConcatArgs& args);
void EmulateQuantDot(const QuantDotArgs& args);
void EmulateDequant(const DequantArgs& args);

}  // namespace cuda_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_HOST_EMULATION_KERNELS_H_
