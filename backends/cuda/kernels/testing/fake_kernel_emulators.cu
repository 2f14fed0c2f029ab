// Registers, with the fake CUDA runtime, a host emulation for every
// instantiation of the kernels' entry points (internal/global_kernels.h), so
// the real launchers (device_kernels.cu) run on a machine without a GPU. An
// element kernel's threads run one after another (they never meet); a row
// kernel's run as a block of host threads (block_emulation.h), so its
// reductions' shuffles and barriers are exercised as on a GPU. Arguments'
// device addresses are checked by the fake and translated to the host
// memory behind them. Testonly; registers at static initialization.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/global_kernels.h"
#include "ferry/backends/cuda/kernels/internal/index_math.h"
#include "ferry/backends/cuda/kernels/internal/kernel_math.h"
#include "ferry/backends/cuda/kernels/internal/quant_formats.h"
#include "ferry/backends/cuda/kernels/testing/block_emulation.h"
#include "ferry/backends/cuda/testing/fake_cuda_control.h"

namespace ferry::cuda_kernels_testing {
namespace {

namespace k = ::ferry::cuda_kernels_internal;
using ::ferry::fake_cuda::AddressTranslator;
using ::ferry::fake_cuda::KernelRun;
using ::ferry::fake_cuda::LaunchShape;
using ::ferry::fake_cuda::MemoryAccess;

int64_t ElementBytes(k::ElemType type) {
  return type == k::ElemType::kF16 || type == k::ElemType::kBF16 ? 2 : 4;
}

// Bytes from t.data to one past its last element (for a block-quantized
// tensor, past its last row's last block).
size_t Extent(const k::TensorDesc& t) {
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (t.ne[i] <= 0) return 0;
  }
  int64_t row_bytes = 0;
  const bool quantized = k::DispatchQuantType(t.type, [&](auto format) {
    using Format = typename decltype(format)::type;
    row_bytes = t.ne[0] / Format::kBlock * Format::kBytes;
  });
  if (!quantized) {
    last = (t.ne[0] - 1) * t.nb[0];
    row_bytes = ElementBytes(t.type);
  }
  for (int i = 1; i < 4; ++i) last += (t.ne[i] - 1) * t.nb[i];
  return static_cast<size_t>(last + row_bytes);
}

// The tensors an op's kernel reads (write = false) and writes.
struct Operand {
  k::TensorDesc* desc;
  bool write;
};

std::vector<Operand> Operands(k::BinaryArgs& p) {
  return {{&p.a, false}, {&p.b, false}, {&p.dst, true}};
}
std::vector<Operand> Operands(k::UnaryArgs& p) {
  return {{&p.a, false}, {&p.dst, true}};
}
std::vector<Operand> Operands(k::NormArgs& p) {
  return {{&p.a, false}, {&p.dst, true}};
}
std::vector<Operand> Operands(k::SoftMaxArgs& p) {
  std::vector<Operand> out = {{&p.a, false}, {&p.dst, true}};
  if (p.has_mask) out.push_back({&p.mask, false});
  return out;
}
std::vector<Operand> Operands(k::GetRowsArgs& p) {
  return {{&p.a, false}, {&p.ids, false}, {&p.dst, true}};
}
std::vector<Operand> Operands(k::SetRowsArgs& p) {
  // dst is read too: the rows not set keep their values.
  return {{&p.rows, false}, {&p.ids, false}, {&p.dst, true}};
}
std::vector<Operand> Operands(k::CopyArgs& p) {
  return {{&p.src, false}, {&p.dst, true}};
}
std::vector<Operand> Operands(k::ConcatArgs& p) {
  return {{&p.a, false}, {&p.b, false}, {&p.dst, true}};
}
std::vector<Operand> Operands(k::QuantDotArgs& p) {
  return {{&p.a, false}, {&p.b, false}, {&p.dst, true}};
}
std::vector<Operand> Operands(k::DequantArgs& p) {
  return {{&p.src, false}, {&p.dst, true}};
}

// rope's two kernels share their arguments but not what they touch.
template <typename Op>
std::vector<Operand> OperandsOf(typename Op::Args& p) {
  return Operands(p);
}
template <>
std::vector<Operand> OperandsOf<k::RopeTableOp>(k::RopeArgs& p) {
  return {{&p.pos, false}, {&p.table, true}};
}
template <>
std::vector<Operand> OperandsOf<k::RopeOp>(k::RopeArgs& p) {
  return {{&p.a, false}, {&p.table, false}, {&p.dst, true}};
}

template <typename Op>
std::vector<MemoryAccess> Accesses(typename Op::Args& args) {
  std::vector<MemoryAccess> out;
  for (const Operand& o : OperandsOf<Op>(args)) {
    const size_t bytes = Extent(*o.desc);
    if (bytes > 0) out.push_back(MemoryAccess{o.desc->data, bytes, o.write});
  }
  return out;
}

// Points the operands at the host memory behind their device addresses.
template <typename Op>
absl::Status Translate(typename Op::Args& args,
                       const AddressTranslator& translator) {
  for (const Operand& o : OperandsOf<Op>(args)) {
    const size_t bytes = Extent(*o.desc);
    if (bytes == 0) continue;
    void* host = translator.Translate(o.desc->data, bytes);
    if (host == nullptr) {
      return absl::InternalError("an operand left its checked range");
    }
    o.desc->data = host;
  }
  return absl::OkStatus();
}

// Notes the kernel's misaligned word accesses (kernel_math.h's Load and
// Store) on this host thread, whose fibers run the emulated threads, while
// it lives; Result() is the fault a GPU would report for the first one.
class MisalignedAccessCheck {
 public:
  MisalignedAccessCheck() { k::misaligned_access_note = &note_; }
  ~MisalignedAccessCheck() { k::misaligned_access_note = nullptr; }
  absl::Status Result() const {
    if (note_.address == nullptr) return absl::OkStatus();
    return fake_cuda::KernelFault(
        cudaErrorMisalignedAddress,
        absl::StrCat("misaligned ", note_.bytes, "-byte access (",
                     reinterpret_cast<uintptr_t>(note_.address) % note_.bytes,
                     " bytes past a multiple of ", note_.bytes, ")"));
  }

 private:
  k::MisalignedAccessNote note_;
};

absl::Status CheckOneDimensional(const LaunchShape& shape) {
  if (shape.grid.y != 1 || shape.grid.z != 1 || shape.block.y != 1 ||
      shape.block.z != 1) {
    return absl::InvalidArgumentError(
        "ferry's kernels are launched with one-dimensional grids and blocks");
  }
  return absl::OkStatus();
}

template <typename Op>
absl::StatusOr<KernelRun> BindElementKernel(void** params,
                                            const LaunchShape& shape) {
  if (absl::Status status = CheckOneDimensional(shape); !status.ok()) {
    return status;
  }
  auto args = std::make_shared<typename Op::Args>(
      *static_cast<const typename Op::Args*>(params[0]));
  const int64_t count = *static_cast<const int64_t*>(params[1]);
  KernelRun run;
  run.accesses = Accesses<Op>(*args);
  run.run = [args, count, shape](const AddressTranslator& translator) {
    typename Op::Args local = *args;
    if (absl::Status status = Translate<Op>(local, translator); !status.ok()) {
      return status;
    }
    // An element kernel's threads never meet: run them one after another.
    MisalignedAccessCheck misaligned;
    for (int64_t b = 0; b < shape.grid.x; ++b) {
      for (int64_t t = 0; t < shape.block.x; ++t) {
        k::RunElementThread<Op>(
            local, count, k::GridPosition{b, shape.grid.x, t, shape.block.x});
      }
    }
    return misaligned.Result();
  };
  return run;
}

template <typename Op>
absl::StatusOr<KernelRun> BindRowKernel(void** params,
                                        const LaunchShape& shape) {
  if (absl::Status status = CheckOneDimensional(shape); !status.ok()) {
    return status;
  }
  auto args = std::make_shared<typename Op::Args>(
      *static_cast<const typename Op::Args*>(params[0]));
  const int64_t rows = *static_cast<const int64_t*>(params[1]);
  KernelRun run;
  run.accesses = Accesses<Op>(*args);
  run.run = [args, rows, shape](const AddressTranslator& translator) {
    typename Op::Args local = *args;
    if (absl::Status status = Translate<Op>(local, translator); !status.ok()) {
      return status;
    }
    MisalignedAccessCheck misaligned;
    absl::Status status = RunBlocks(
        shape.grid.x, static_cast<int>(shape.block.x),
        [&](const k::GridPosition& at, HostSync& sync, float* shared) {
          k::SyncBlock<HostSync> block{at.thread, at.threads, shared, &sync};
          k::RunRowThread<Op>(local, rows, at, block);
        });
    if (!status.ok()) return status;
    return misaligned.Result();
  };
  return run;
}

[[maybe_unused]] const bool registered = [] {
  k::ForEachElementOp([](auto tag) {
    using Op = typename decltype(tag)::type;
    fake_cuda::RegisterKernelEmulator(
        reinterpret_cast<const void*>(&k::ElementKernel<Op>),
        &BindElementKernel<Op>);
  });
  k::ForEachRowOp([](auto tag) {
    using Op = typename decltype(tag)::type;
    fake_cuda::RegisterKernelEmulator(
        reinterpret_cast<const void*>(&k::RowKernel<Op>), &BindRowKernel<Op>);
  });
  return true;
}();

}  // namespace
}  // namespace ferry::cuda_kernels_testing
