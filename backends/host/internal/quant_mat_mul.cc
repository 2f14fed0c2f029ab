#include "ferry/backends/host/internal/quant_mat_mul.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/status/statusor.h"
#include "ferry/backends/host/internal/mat_mul.h"
#include "ferry/backends/host/internal/mat_mul_impl.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_tile.h"
#include "ferry/backends/host/vec_dot.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/dequantize.h"
#include "ferry/quant/quant_dtype.h"
#include "ferry/quant/quant_type.h"
#include "ferry/quant/quantize.h"

namespace ferry {
namespace cpu_internal {
namespace {

// Weight rows per claimed unit in the weight-row split.
constexpr int64_t kRowUnit = 16;
// Grouped weights' tiles need every thread's rows to start at a group.
static_assert(kRowUnit % kGroupRows == 0);
// Activation bytes a token run may occupy: the run stays in L1 while every
// weight row streams past it once.
constexpr int64_t kRunBytes = 16 << 10;
constexpr int64_t kMaxRunRows = 16;

// Bytes of f32 weight rows dequantized at once for the GEMM (per thread):
// each run packs b again, so runs are long (4 MiB measured 4% faster than
// 1 MiB on SmolLM2's 128-token prompt).
constexpr int64_t kGemmPanelBytes = 4 << 20;

// Weights of at least this many rows are dequantized straight into the
// GEMM's panel layout (packed_layout.h) in runs of whole panels, which
// spares the GEMM packing them again; smaller ones (k/v projections) into
// rows, in runs of 16 rows so that threads split them evenly.
bool GemmPacked(int64_t m) { return m >= kMinUnalignedPackedRows; }

int64_t GemmRowUnit(int64_t m) { return GemmPacked(m) ? kPanelWidth : 16; }

int64_t GemmRunRows(int64_t m, int64_t k) {
  const int64_t unit = GemmRowUnit(m);
  const int64_t rows =
      kGemmPanelBytes / (k * static_cast<int64_t>(sizeof(float)));
  return std::max(unit, rows / unit * unit);
}

// Rows dequantized at once before they are interleaved into a panel:
// each column's kPanelGroupRows values then go out as one contiguous write.
constexpr int64_t kPanelGroupRows = 8;

// Scratch of the GEMM path: a run's panel plus a group of rows.
size_t GemmScratchBytes(int64_t m, int64_t k) {
  return static_cast<size_t>((GemmRunRows(m, k) + kPanelGroupRows) * k) *
         sizeof(float);
}

// The GEMM path: weight rows [rows.begin, rows.end) dequantized into
// `panel` a run at a time, each run multiplied by all of b.
void DequantizedGemm(const QuantMatMulArgs& args, Range rows, float* panel) {
  const bool packed = GemmPacked(args.m);
  const int64_t run = GemmRunRows(args.m, args.k);
  const int64_t k = args.k;
  float* group = panel + run * k;
  const auto* a = static_cast<const std::byte*>(args.a);
  for (int64_t r0 = rows.begin; r0 < rows.end; r0 += run) {
    const int64_t r1 = std::min(rows.end, r0 + run);
    // Cannot fail below: the type has a dequantizer, k whole blocks.
    if (!packed) {
      for (int64_t i = r0; i < r1; ++i) {
        (void)quant::DequantizeRow(args.a_type, a + i * args.a_row_bytes,
                                   panel + (i - r0) * k, k);
      }
    }
    // Packed: element (l, r) of the run at (r / W) * W * k + l * W + r % W;
    // groups of kPanelGroupRows rows never straddle a panel (W is a multiple).
    for (int64_t g = r0; packed && g < r1; g += kPanelGroupRows) {
      const int64_t count = std::min(kPanelGroupRows, r1 - g);
      for (int64_t q = 0; q < count; ++q) {
        (void)quant::DequantizeRow(args.a_type, a + (g + q) * args.a_row_bytes,
                                   group + q * k, k);
      }
      const int64_t r = g - r0;
      float* column =
          panel + (r / kPanelWidth) * kPanelWidth * k + r % kPanelWidth;
      for (int64_t l = 0; l < k; ++l) {
        for (int64_t q = 0; q < count; ++q) {
          column[l * kPanelWidth + q] = group[q * k + l];
        }
      }
    }
    MatMulArgs gemm;
    gemm.a_type = DType::kF32;
    gemm.a = panel;
    gemm.lda = k;
    gemm.a_packed = packed;
    gemm.b = args.b;
    gemm.ldb = args.ldb;
    gemm.dst = args.dst + r0;
    gemm.ldc = args.ldc;
    gemm.m = r1 - r0;
    gemm.n = args.n;
    gemm.k = k;
    MatMul(gemm, 0, 1);
  }
}

quant::QuantType ActivationType(quant::QuantType a_type) {
  // Every block dtype the graph has takes a kernel (kWeightTypes in
  // kernels.cc); quant_mat_mul_test checks each with QuantMatMulSupports.
  return quant::VecDotActivationType(a_type).value_or(quant::QuantType::kQ8_0);
}

// Tokens quantized and multiplied at once in the token split.
int64_t RunRows(int64_t act_row_bytes) {
  return std::clamp(kRunBytes / act_row_bytes, int64_t{1}, kMaxRunRows);
}

// Types whose weights may come in groups of rows (a_grouped): those the
// group layout takes.
bool GroupPackable(quant::QuantType type) {
  const absl::StatusOr<DType> dtype = quant::DTypeOf(type);
  return dtype.ok() && QuantGroupLayout::Packable(
                           *dtype, {quant::BlockSize(type), kGroupRows, 1, 1});
}

// Weights in groups of rows (QuantGroupLayout) without tiles for `isa`:
// each group is unpacked into rows at `rows` and multiplied one dot at a
// time.
void UngroupedDots(const QuantMatMulArgs& args, quant::VecDotFn dot,
                   Range range, const std::byte* act, int64_t act_row_bytes,
                   std::byte* rows) {
  const QuantGroupLayout layout(*quant::DTypeOf(args.a_type),
                                {args.k, args.m, 1, 1});
  const int64_t row_bytes = layout.row_bytes();
  for (int64_t i = range.begin; i < range.end; i += kGroupRows) {
    const int64_t count = std::min(kGroupRows, range.end - i);
    layout.Unpack(args.a, static_cast<size_t>(i * row_bytes),
                  static_cast<size_t>(count * row_bytes), rows);
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t j = 0; j < args.n; ++j) {
        args.dst[j * args.ldc + i + r] =
            dot(rows + r * row_bytes, act + j * act_row_bytes, args.k);
      }
    }
  }
}

// Tiles for 2 tokens or more, where the type has them.
QuantTileFn Tiles(quant::QuantType a_type, int64_t n, Isa isa) {
  return n >= 2 ? FindQuantTile(a_type, isa) : nullptr;
}

// Tiles read each weight row once for all tokens: threads split the rows,
// so no weight is read twice.
bool SplitTokens(quant::QuantType a_type, int64_t n, int nth, Isa isa) {
  return nth > 1 && n >= kMinTokenSplitRows * nth &&
         Tiles(a_type, n, isa) == nullptr;
}

int64_t MinGemmTokens(quant::QuantType type, int64_t requested) {
  return requested == kAutoGemmTokens ? DefaultMinGemmTokens(type) : requested;
}

// How QuantMatMul splits `args` between nth threads (quant_mat_mul.h): runs
// of weight rows through the dequantized GEMM, runs of tokens, or runs of
// weight rows each taking every token.
enum class Split { kGemm, kTokens, kWeightRows };

Split SplitOf(const QuantMatMulArgs& args, int nth, Isa isa) {
  if (args.a_grouped) return Split::kWeightRows;
  if (args.n >= MinGemmTokens(args.a_type, args.min_gemm_tokens)) {
    return Split::kGemm;
  }
  return SplitTokens(args.a_type, args.n, nth, isa) ? Split::kTokens
                                                    : Split::kWeightRows;
}

// Quantizes b rows [begin, end) into `act`, one act_row_bytes apart.
void QuantizeRows(const QuantMatMulArgs& args, quant::QuantType act_type,
                  int64_t act_row_bytes, int64_t begin, int64_t end,
                  std::byte* act) {
  for (int64_t j = begin; j < end; ++j) {
    // Cannot fail: k is a whole number of blocks and the type has a
    // quantizer (the kernel's CheckSupported admits no other type).
    (void)quant::QuantizeRow(act_type, args.b + j * args.ldb,
                             act + (j - begin) * act_row_bytes, args.k);
  }
}

// dst[j][i] for weight rows [rows.begin, rows.end) and tokens [tokens.begin,
// tokens.end), whose activations are at `act`. Weight rows outer: each is
// read once while the activations stay in cache.
void Dots(const QuantMatMulArgs& args, quant::VecDotFn dot, Range rows,
          Range tokens, const std::byte* act, int64_t act_row_bytes) {
  const auto* a = static_cast<const std::byte*>(args.a);
  for (int64_t i = rows.begin; i < rows.end; ++i) {
    const std::byte* w = a + i * args.a_row_bytes;
    float* d = args.dst + i;
    for (int64_t j = tokens.begin; j < tokens.end; ++j) {
      d[j * args.ldc] =
          dot(w, act + (j - tokens.begin) * act_row_bytes, args.k);
    }
  }
}

}  // namespace

int64_t DefaultMinGemmTokens(quant::QuantType type) {
  return GroupPackable(type) &&
                 FindQuantTile(type, quant::PreferredIsa(type)) != nullptr
             ? std::numeric_limits<int64_t>::max()
             : kMinGemmTokens;
}

bool QuantMatMulSupports(quant::QuantType type) {
  const quant::QuantTypeInfo& info = quant::GetQuantTypeInfo(type);
  return info.block_size > 1 && quant::VecDotActivationType(type).ok() &&
         quant::FindVecDot(type, Isa::kScalar) != nullptr;
}

size_t QuantMatMulScratchBytes(quant::QuantType a_type, int64_t m, int64_t n,
                               int64_t k, int nth, int64_t min_gemm_tokens) {
  min_gemm_tokens = MinGemmTokens(a_type, min_gemm_tokens);
  const int64_t act_row_bytes = quant::RowBytes(ActivationType(a_type), k);
  const int64_t rows = SplitTokens(a_type, n, nth, quant::PreferredIsa(a_type))
                           ? RunRows(act_row_bytes)
                           : n;
  size_t bytes = static_cast<size_t>(rows * act_row_bytes);
  if (GroupPackable(a_type)) {
    // Weights in groups (a_grouped) take all n tokens at once, and without
    // tiles unpack a group of rows to multiply.
    bytes = std::max(
        bytes, static_cast<size_t>(n * act_row_bytes +
                                   kGroupRows * quant::RowBytes(a_type, k)));
  }
  if (n >= min_gemm_tokens) bytes = std::max(bytes, GemmScratchBytes(m, k));
  return bytes;
}

bool SharesQuantizedB(const QuantMatMulArgs& args, int nth) {
  return nth >= 2 && args.n >= 2 * int64_t{nth} &&
         SplitOf(args, nth, quant::PreferredIsa(args.a_type)) ==
             Split::kWeightRows;
}

size_t QuantizedBBytes(quant::QuantType a_type, int64_t n, int64_t k) {
  return static_cast<size_t>(n * quant::RowBytes(ActivationType(a_type), k));
}

void QuantizeB(const QuantMatMulArgs& args, int64_t begin, int64_t end,
               std::byte* quantized_b) {
  const quant::QuantType act_type = ActivationType(args.a_type);
  const int64_t act_row_bytes = quant::RowBytes(act_type, args.k);
  QuantizeRows(args, act_type, act_row_bytes, begin, end,
               quantized_b + begin * act_row_bytes);
}

void QuantMatMul(const QuantMatMulArgs& args, int ith, int nth, void* scratch,
                 Isa isa) {
  const Split split = SplitOf(args, nth, isa);
  if (split == Split::kGemm) {
    auto* panel = static_cast<float*>(scratch);
    if (args.next == nullptr) {
      return DequantizedGemm(
          args, PartitionRange(args.m, GemmRowUnit(args.m), ith, nth), panel);
    }
    for (;;) {
      const Range rows =
          ClaimColumns(*args.next, args.m, GemmRowUnit(args.m), 1, nth);
      if (rows.size() == 0) return;
      DequantizedGemm(args, rows, panel);
    }
  }
  const quant::VecDotFn dot = quant::FindVecDot(args.a_type, isa);
  const quant::QuantType act_type = ActivationType(args.a_type);
  const int64_t act_row_bytes = quant::RowBytes(act_type, args.k);
  auto* act = static_cast<std::byte*>(scratch);
  if (split == Split::kTokens) {
    const int64_t run = RunRows(act_row_bytes);
    const auto compute = [&](Range tokens) {
      for (int64_t j = tokens.begin; j < tokens.end; j += run) {
        const Range chunk{j, std::min(tokens.end, j + run)};
        QuantizeRows(args, act_type, act_row_bytes, chunk.begin, chunk.end,
                     act);
        Dots(args, dot, Range{0, args.m}, chunk, act, act_row_bytes);
      }
    };
    if (args.next == nullptr) {
      return compute(PartitionRange(args.n, run, ith, nth));
    }
    for (;;) {
      const Range tokens = ClaimColumns(*args.next, args.n, run, 1, nth);
      if (tokens.size() == 0) return;
      compute(tokens);
    }
  }
  // Few tokens: threads split weight rows, each reading every token; each
  // quantizes all of them unless the caller did so once (quantized_b).
  std::byte* const group_rows = act + args.n * act_row_bytes;
  const std::byte* quantized = args.quantized_b;
  if (quantized == nullptr) {
    QuantizeRows(args, act_type, act_row_bytes, 0, args.n, act);
    quantized = act;
  }
  // Names this thread's freshly quantized rows for the tile calls below.
  thread_local uint64_t quantized_rows = 0;
  const Range tokens{0, args.n};
  // Grouped weights have no rows to dot one at a time: tiles from 1 token.
  const QuantTileFn tiles = args.a_grouped ? FindQuantTile(args.a_type, isa)
                                           : Tiles(args.a_type, args.n, isa);
  QuantTileArgs tile_args;
  tile_args.w = static_cast<const std::byte*>(args.a);
  tile_args.w_row_bytes = quant::RowBytes(args.a_type, args.k);
  tile_args.grouped = args.a_grouped;
  tile_args.act = quantized;
  tile_args.act_row_bytes = act_row_bytes;
  tile_args.dst = args.dst;
  tile_args.ldc = args.ldc;
  tile_args.k = args.k;
  tile_args.act_id = ++quantized_rows;
  if (!args.a_grouped) tile_args.w_row_bytes = args.a_row_bytes;
  const auto compute = [&](Range rows) {
    if (tiles != nullptr) {
      tiles(tile_args, rows.begin, rows.end, tokens.begin, tokens.end);
    } else if (args.a_grouped) {
      UngroupedDots(args, dot, rows, quantized, act_row_bytes, group_rows);
    } else {
      Dots(args, dot, rows, tokens, quantized, act_row_bytes);
    }
  };
  if (args.next == nullptr) {
    return compute(PartitionRange(args.m, kRowUnit, ith, nth));
  }
  for (;;) {
    const Range rows = ClaimColumns(*args.next, args.m, kRowUnit, 1, nth);
    if (rows.size() == 0) return;
    compute(rows);
  }
}

void QuantMatMul(const QuantMatMulArgs& args, int ith, int nth, void* scratch) {
  QuantMatMul(args, ith, nth, scratch, quant::PreferredIsa(args.a_type));
}

}  // namespace cpu_internal
}  // namespace ferry
