// The per-element and per-row math of the CUDA kernels, with all their index
// computations, as __host__ __device__ code. The kernels of
// device_kernels.cu call it from every thread; the host emulation
// (host_emulation_kernels.cu, for tests on machines without a GPU) calls the
// very same functions serially, so the emulation checks the kernels' math and
// addressing against the reference evaluator.
//
// Element ops are structs with
//   using Args = ...;
//   static int64_t Count(const Args&);          // Elements to compute.
//   static void Apply(const Args&, int64_t e);  // Computes element e.
// and row ops with
//   static int64_t Rows(const Args&);
//   template <class Block> static void Apply(const Args&, int64_t row, Block&);
// where Block gives this thread's index `tid` among `nt` threads working on
// the row and block-wide Sum/Max reductions (every thread gets the result).
// Both reductions are BlockReduce below, written once over a `Sync` that
// supplies warp shuffles and barriers: the hardware's in device code
// (global_kernels.h), emulated ones on the host (the fake runtime's block
// emulation), so host tests run the very barrier and shuffle sequence.
// A row op's threads each touch only elements i = tid, tid + nt, ...; an
// element is read and written by one thread, so in-place runs (dst == a)
// are safe as long as every read of a row precedes the reduction that ends
// its pass.
//
// nvcc only: include it from .cu files.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_KERNEL_MATH_H_
#define FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_KERNEL_MATH_H_

#ifndef __CUDACC__
#error "kernel_math.h is CUDA code: include it only from .cu files"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/index_math.h"

#define FERRY_HD __host__ __device__ __forceinline__

namespace ferry {
namespace cuda_kernels_internal {

// ---------------------------------------------------------------------------
// Addressing.

FERRY_HD char* ElementPtr(const TensorDesc& t, int64_t i0, int64_t i1,
                          int64_t i2, int64_t i3) {
  return static_cast<char*>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] +
         i2 * t.nb[2] + i3 * t.nb[3];
}

FERRY_HD char* ElementPtr(const TensorDesc& t, const int64_t (&i)[4]) {
  return ElementPtr(t, i[0], i[1], i[2], i[3]);
}

FERRY_HD char* RowPtr(const TensorDesc& t, int64_t i1, int64_t i2, int64_t i3) {
  return ElementPtr(t, 0, i1, i2, i3);
}

FERRY_HD int64_t NumElements(const TensorDesc& t) {
  return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
}

FERRY_HD int64_t NumRows(const TensorDesc& t) {
  return t.ne[1] * t.ne[2] * t.ne[3];
}

// Splits row number r (i1 fastest) of shape ne into (i1, i2, i3).
FERRY_HD void UnflattenRow(int64_t r, const int64_t (&ne)[4], int64_t& i1,
                           int64_t& i2, int64_t& i3) {
  i1 = r % ne[1];
  r /= ne[1];
  i2 = r % ne[2];
  i3 = r / ne[2];
}

// ---------------------------------------------------------------------------
// Element types and conversions (round to nearest even, like graph/dtype.h;
// identical bits on host and device except for NaN payloads).

// Raw storage types for bit-exact copies of one dtype into itself.
struct Raw16 {
  uint16_t bits;
};
struct Raw32 {
  uint32_t bits;
};

FERRY_HD float ToFloat(float x) { return x; }
FERRY_HD float ToFloat(__half x) { return __half2float(x); }
FERRY_HD float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
FERRY_HD T FromFloat(float x);
template <>
FERRY_HD float FromFloat<float>(float x) {
  return x;
}
template <>
FERRY_HD __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
FERRY_HD __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Converts one element; same-type copies go through Raw16/Raw32 unchanged.
template <typename Src, typename Dst>
FERRY_HD Dst ConvertElement(Src x) {
  return FromFloat<Dst>(ToFloat(x));
}
template <>
FERRY_HD Raw16 ConvertElement<Raw16, Raw16>(Raw16 x) {
  return x;
}
template <>
FERRY_HD Raw32 ConvertElement<Raw32, Raw32>(Raw32 x) {
  return x;
}

// Element access. A view may start at any byte offset (graph views take
// one), and a GPU faults on a word access at an address that is not a
// multiple of the word's size (cudaErrorMisalignedAddress, which ruins the
// context). So every element goes through Load/Store: one word access
// where the address allows it, byte by byte where not (a branch the warp
// takes together, since a tensor's elements share their alignment).

// Host emulation only (the fake CUDA runtime's, testing/): where the thread
// running a kernel's code notes the first word access at a misaligned
// address, which a GPU would fault on. Null outside such runs; a host
// variable, never read by device code.
struct MisalignedAccessNote {
  const void* address = nullptr;
  int bytes = 0;
};
inline thread_local MisalignedAccessNote* misaligned_access_note = nullptr;

template <typename T>
FERRY_HD bool IsAlignedFor(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & (sizeof(T) - 1)) == 0;
}

// A word access as a GPU makes it (emulated runs note a misaligned one).
template <typename T>
FERRY_HD void NoteWordAccess(const void* p) {
#ifndef __CUDA_ARCH__
  if (misaligned_access_note != nullptr &&
      misaligned_access_note->address == nullptr && !IsAlignedFor<T>(p)) {
    misaligned_access_note->address = p;
    misaligned_access_note->bytes = static_cast<int>(sizeof(T));
  }
#endif
}

template <typename T>
FERRY_HD T Load(const char* p) {
  if (IsAlignedFor<T>(p)) {
    NoteWordAccess<T>(p);
    return *reinterpret_cast<const T*>(p);
  }
  T value;
  memcpy(&value, p, sizeof(T));
  return value;
}
template <typename T>
FERRY_HD void Store(char* p, T value) {
  if (IsAlignedFor<T>(p)) {
    NoteWordAccess<T>(p);
    *reinterpret_cast<T*>(p) = value;
    return;
  }
  memcpy(p, &value, sizeof(T));
}

// Element e of a contiguous T array at `base`.
template <typename T>
FERRY_HD T LoadAt(const void* base, int64_t e) {
  return Load<T>(static_cast<const char*>(base) + e * int64_t{sizeof(T)});
}
template <typename T>
FERRY_HD void StoreAt(void* base, int64_t e, T value) {
  Store<T>(static_cast<char*>(base) + e * int64_t{sizeof(T)}, value);
}

// A contiguous f32 row at any byte address, through Load/Store.
struct F32Row {
  char* p = nullptr;
  FERRY_HD float operator[](int64_t c) const { return LoadAt<float>(p, c); }
  FERRY_HD void Set(int64_t c, float value) const {
    StoreAt<float>(p, c, value);
  }
};

FERRY_HD float QuietNaN() {
  const uint32_t bits = 0x7fc00000u;
  float value;
  memcpy(&value, &bits, sizeof(value));
  return value;
}

// Dispatch over element types (host code): calls fn(TypeTag<T>{}) with the
// storage type of `type` (float, __half, __nv_bfloat16 or int32_t).
template <typename T>
struct TypeTag {
  using type = T;
};

template <typename Fn>
void DispatchFloatType(ElemType type, Fn&& fn) {
  switch (type) {
    case ElemType::kF16:
      return fn(TypeTag<__half>{});
    case ElemType::kBF16:
      return fn(TypeTag<__nv_bfloat16>{});
    default:
      return fn(TypeTag<float>{});
  }
}

// Calls fn(TypeTag<Src>{}, TypeTag<Dst>{}) for a copy from `src` to `dst`:
// Raw16/Raw32 for a type into itself (i32 only that way), else the float
// storage types.
template <typename Fn>
void DispatchCopyTypes(ElemType src, ElemType dst, Fn&& fn) {
  if (src == dst) {
    if (src == ElemType::kF16 || src == ElemType::kBF16) {
      return fn(TypeTag<Raw16>{}, TypeTag<Raw16>{});
    }
    return fn(TypeTag<Raw32>{}, TypeTag<Raw32>{});
  }
  DispatchFloatType(
      src, [&](auto s) { DispatchFloatType(dst, [&](auto d) { fn(s, d); }); });
}

// Calls fn(TypeTag<RawN>{}) for the raw storage type of `type`'s size.
template <typename Fn>
void DispatchRawType(ElemType type, Fn&& fn) {
  if (type == ElemType::kF16 || type == ElemType::kBF16) {
    return fn(TypeTag<Raw16>{});
  }
  return fn(TypeTag<Raw32>{});
}

// ---------------------------------------------------------------------------
// Element ops. Results are contiguous (cpy: any layout), so element e of the
// result is consecutive along ne[0] for consecutive e: coalesced on a GPU.

struct BinaryOp {
  using Args = BinaryArgs;
  static FERRY_HD int64_t Count(const Args& p) { return NumElements(p.dst); }
  static FERRY_HD void Apply(const Args& p, int64_t e) {
    // Operands are found without coordinates when their layouts allow (no
    // division at all in the common cases).
    int64_t i[4] = {0, 0, 0, 0};
    if (!p.dst_linear || p.a_at != Addressing::kLinear ||
        p.b_at == Addressing::kGeneral) {
      Unflatten(e, p.index, i);
    }
    char* out = p.dst_linear ? static_cast<char*>(p.dst.data) + e * int64_t{4}
                             : ElementPtr(p.dst, i);
    const float x = p.a_at == Addressing::kLinear
                        ? LoadAt<float>(p.a.data, e)
                        : Load<float>(ElementPtr(p.a, i));
    float y;
    if (p.b_at == Addressing::kLinear) {
      y = LoadAt<float>(p.b.data, e);
    } else if (p.b_at == Addressing::kRow) {
      y = LoadAt<float>(p.b.data,
                        Mod(e, p.index.div[0], p.index.ne[0], p.index.fast));
    } else {
      int64_t j[4];
      for (int d = 0; d < 4; ++d) {
        j[d] = p.b.ne[d] == p.index.ne[d]
                   ? i[d]
                   : Mod(i[d], p.b_div[d], p.b.ne[d], p.index.fast);
      }
      y = Load<float>(ElementPtr(p.b, j));
    }
    float r;
    switch (p.kind) {
      case BinaryKind::kAdd:
        r = x + y;
        break;
      case BinaryKind::kSub:
        r = x - y;
        break;
      case BinaryKind::kMul:
        r = x * y;
        break;
      default:
        r = x / y;
        break;
    }
    Store<float>(out, r);
  }
};

// Activations as graph/ops.h defines them; gelu's tanh form is computed as
// x * sigmoid(2u) like the CPU kernels (the two are equal).
FERRY_HD float Silu(float x) { return x / (1.0f + expf(-x)); }
FERRY_HD float Gelu(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  constexpr float kGeluCoef = 0.044715f;
  const float u = kSqrt2OverPi * x * (1.0f + kGeluCoef * x * x);
  return x / (1.0f + expf(-2.0f * u));
}
FERRY_HD float Relu(float x) { return x > 0.0f ? x : 0.0f; }

struct UnaryOp {
  using Args = UnaryArgs;
  static FERRY_HD int64_t Count(const Args& p) { return NumElements(p.dst); }
  static FERRY_HD void Apply(const Args& p, int64_t e) {
    const char* in;
    char* out;
    if (p.linear) {
      in = static_cast<const char*>(p.a.data) + e * int64_t{4};
      out = static_cast<char*>(p.dst.data) + e * int64_t{4};
    } else {
      int64_t i[4];
      Unflatten(e, p.index, i);
      in = ElementPtr(p.a, i);
      out = ElementPtr(p.dst, i);
    }
    const float x = Load<float>(in);
    float r;
    switch (p.kind) {
      case UnaryKind::kScale:
        r = x * p.scale;
        break;
      case UnaryKind::kSilu:
        r = Silu(x);
        break;
      case UnaryKind::kGelu:
        r = Gelu(x);
        break;
      case UnaryKind::kTanh:
        r = tanhf(x);
        break;
      default:
        r = Relu(x);
        break;
    }
    Store<float>(out, r);
  }
};

// get_rows with a's storage type A: dst[i3][i2][i1] =
// a[i3][i2][ids[i3][i2][i1]], a row of NaN for an id outside [0, a.ne[1]).
template <typename A>
struct GetRowsOp {
  using Args = GetRowsArgs;
  static FERRY_HD int64_t Count(const Args& p) { return NumElements(p.dst); }
  static FERRY_HD void Apply(const Args& p, int64_t e) {
    int64_t i[4];
    Unflatten(e, p.index, i);
    // ids is [N, A2, A3, 1]: element (i1, i2, i3) of the result reads
    // ids[i1][i2][i3].
    const int32_t id = Load<int32_t>(ElementPtr(p.ids, i[1], i[2], i[3], 0));
    float r;
    if (id < 0 || id >= p.a.ne[1]) {
      r = QuietNaN();
    } else {
      r = ToFloat(Load<A>(ElementPtr(p.a, i[0], id, i[2], i[3])));
    }
    Store<float>(ElementPtr(p.dst, i), r);
  }
};

// set_rows into dst of storage type D: dst[ids[n]][i0] = rows[n][i0], ids
// outside [0, dst.ne[1]) skipped. ids are distinct (graph/ops.h), so no two
// threads write one element.
template <typename D>
struct SetRowsOp {
  using Args = SetRowsArgs;
  static FERRY_HD int64_t Count(const Args& p) { return NumElements(p.rows); }
  static FERRY_HD void Apply(const Args& p, int64_t e) {
    int64_t i[4];
    Unflatten(e, p.index, i);
    const int32_t id = Load<int32_t>(ElementPtr(p.ids, i[1], 0, 0, 0));
    if (id < 0 || id >= p.dst.ne[1]) return;
    const float r = Load<float>(ElementPtr(p.rows, i));
    Store<D>(ElementPtr(p.dst, i[0], id, 0, 0), FromFloat<D>(r));
  }
};

// cpy, cont and mul_mat's operand conversions.
template <typename Src, typename Dst>
struct CopyOp {
  using Args = CopyArgs;
  static FERRY_HD int64_t Count(const Args& p) { return NumElements(p.dst); }
  static FERRY_HD void Apply(const Args& p, int64_t e) {
    if (p.linear) {
      // Both contiguous: element e at e, whatever the shapes.
      StoreAt<Dst>(p.dst.data, e,
                   ConvertElement<Src, Dst>(LoadAt<Src>(p.src.data, e)));
      return;
    }
    int64_t d[4];
    Unflatten(e, p.dst_index, d);
    const char* from;
    if (p.same_shape) {
      from = ElementPtr(p.src, d);
    } else {
      int64_t s[4];
      Unflatten(e, p.src_index, s);
      from = ElementPtr(p.src, s);
    }
    Store<Dst>(ElementPtr(p.dst, d), ConvertElement<Src, Dst>(Load<Src>(from)));
  }
};

// concat with raw storage type T (a, b and dst share the dtype).
template <typename T>
struct ConcatOp {
  using Args = ConcatArgs;
  static FERRY_HD int64_t Count(const Args& p) { return NumElements(p.dst); }
  static FERRY_HD void Apply(const Args& p, int64_t e) {
    int64_t i[4];
    Unflatten(e, p.index, i);
    char* to = ElementPtr(p.dst, i);
    const int dim = p.dim;
    const TensorDesc* src = &p.a;
    if (i[dim] >= p.a.ne[dim]) {
      i[dim] -= p.a.ne[dim];
      src = &p.b;
    }
    Store<T>(to, Load<T>(ElementPtr(*src, i)));
  }
};

// ---------------------------------------------------------------------------
// Row ops.

// rms_norm / norm over each row of ne[0] elements.
struct NormOp {
  using Args = NormArgs;
  static FERRY_HD int64_t Rows(const Args& p) { return NumRows(p.dst); }
  template <typename Block>
  static FERRY_HD void Apply(const Args& p, int64_t row, Block& block) {
    int64_t i1, i2, i3;
    UnflattenRow(row, p.dst.ne, i1, i2, i3);
    const F32Row x{RowPtr(p.a, i1, i2, i3)};
    const F32Row d{RowPtr(p.dst, i1, i2, i3)};
    const int64_t n = p.dst.ne[0];
    float mean = 0.0f;
    if (p.center) {
      float sum = 0.0f;
      for (int64_t c = block.tid; c < n; c += block.nt) sum += x[c];
      sum = block.Sum(sum);
      mean =
          static_cast<float>(static_cast<double>(sum) / static_cast<double>(n));
    }
    float sum_sq = 0.0f;
    for (int64_t c = block.tid; c < n; c += block.nt) {
      const float v = x[c] - mean;
      sum_sq += v * v;
    }
    // After this reduction every read of the row is done: writing is safe
    // in place.
    sum_sq = block.Sum(sum_sq);
    const float inv = static_cast<float>(
        1.0 / sqrt(static_cast<double>(sum_sq) / static_cast<double>(n) +
                   static_cast<double>(p.eps)));
    for (int64_t c = block.tid; c < n; c += block.nt) {
      d.Set(c, (x[c] - mean) * inv);
    }
  }
};

// soft_max(a * scale + mask) over each row; a fully masked row (max -inf)
// gives NaN like the CPU kernels.
struct SoftMaxOp {
  using Args = SoftMaxArgs;
  static FERRY_HD int64_t Rows(const Args& p) { return NumRows(p.dst); }
  template <typename Block>
  static FERRY_HD void Apply(const Args& p, int64_t row, Block& block) {
    int64_t i1, i2, i3;
    UnflattenRow(row, p.dst.ne, i1, i2, i3);
    const F32Row x{RowPtr(p.a, i1, i2, i3)};
    const F32Row d{RowPtr(p.dst, i1, i2, i3)};
    const F32Row m{
        p.has_mask ? RowPtr(p.mask, i1, i2 % p.mask.ne[2], i3 % p.mask.ne[3])
                   : nullptr};
    const int64_t n = p.dst.ne[0];
    // Each thread writes only the elements it read, so in place is safe.
    float max = -INFINITY;
    for (int64_t c = block.tid; c < n; c += block.nt) {
      const float v = x[c] * p.scale + (p.has_mask ? m[c] : 0.0f);
      d.Set(c, v);
      max = fmaxf(max, v);
    }
    max = block.Max(max);
    if (max == -INFINITY) {
      for (int64_t c = block.tid; c < n; c += block.nt) d.Set(c, QuietNaN());
      return;
    }
    float sum = 0.0f;
    for (int64_t c = block.tid; c < n; c += block.nt) {
      const float v = expf(d[c] - max);
      d.Set(c, v);
      sum += v;
    }
    sum = block.Sum(sum);
    const float inv = 1.0f / sum;
    for (int64_t c = block.tid; c < n; c += block.nt) d.Set(c, d[c] * inv);
  }
};

// rope, first kernel: element e = (pair k, position i) of the table gets
// the cosine and sine of position i's angle for pair k. The angle in
// double: positions reach thousands of radians.
struct RopeTableOp {
  using Args = RopeArgs;
  static FERRY_HD int64_t Count(const Args& p) {
    return p.table_index.ne[0] * p.table_index.ne[1];
  }
  static FERRY_HD void Apply(const Args& p, int64_t e) {
    int64_t i[4];
    Unflatten(e, p.table_index, i);
    const int64_t k = i[0];
    const int32_t position = Load<int32_t>(ElementPtr(p.pos, i[1], 0, 0, 0));
    const double theta =
        static_cast<double>(position) * static_cast<double>(p.freq_scale) *
        pow(static_cast<double>(p.freq_base),
            -2.0 * static_cast<double>(k) / static_cast<double>(p.n_dims));
    const F32Row entry{ElementPtr(p.table, 2 * k, i[1], 0, 0)};
    entry.Set(0, static_cast<float>(cos(theta)));
    entry.Set(1, static_cast<float>(sin(theta)));
  }
};

// rope, second kernel: each head row's pairs rotated by its position's
// table row (the block's threads share the n_dims / 2 pairs).
struct RopeOp {
  using Args = RopeArgs;
  static FERRY_HD int64_t Rows(const Args& p) { return NumRows(p.dst); }
  template <typename Block>
  static FERRY_HD void Apply(const Args& p, int64_t row, Block& block) {
    int64_t i1, i2, i3;
    UnflattenRow(row, p.dst.ne, i1, i2, i3);
    const F32Row x{RowPtr(p.a, i1, i2, i3)};
    const F32Row d{RowPtr(p.dst, i1, i2, i3)};
    const F32Row angles{RowPtr(p.table, i2, 0, 0)};
    const int64_t n = p.dst.ne[0];
    const int64_t n_dims = p.n_dims;
    const int64_t half = n_dims / 2;
    for (int64_t k = block.tid; k < half; k += block.nt) {
      const float cos_theta = angles[2 * k];
      const float sin_theta = angles[2 * k + 1];
      const int64_t c0 = p.neox ? k : 2 * k;
      const int64_t c1 = p.neox ? k + half : 2 * k + 1;
      // In place is safe: this thread reads the pair before writing it.
      const float x0 = x[c0];
      const float x1 = x[c1];
      d.Set(c0, x0 * cos_theta - x1 * sin_theta);
      d.Set(c1, x0 * sin_theta + x1 * cos_theta);
    }
    if (d.p != x.p) {
      for (int64_t c = n_dims + block.tid; c < n; c += block.nt) {
        d.Set(c, x[c]);
      }
    }
  }
};

// ---------------------------------------------------------------------------
// Block-quantized weights: a Format (internal/quant_formats.h) gives its
// block's elements and bytes and Value(block, j); the ops below take any.

// Element e of a quantized row starting at `row`.
template <typename Format>
FERRY_HD float QuantElement(const char* row, int64_t e) {
  return Format::Value(row + (e / Format::kBlock) * Format::kBytes,
                       static_cast<int>(e % Format::kBlock));
}

// Dequantizes a's elements into contiguous f16 (the GEMM path of mul_mat).
template <typename Format>
struct DequantOp {
  using Args = DequantArgs;
  static FERRY_HD int64_t Count(const Args& p) { return NumElements(p.dst); }
  static FERRY_HD void Apply(const Args& p, int64_t e) {
    int64_t i[4];
    Unflatten(e, p.index, i);
    const float v = QuantElement<Format>(RowPtr(p.src, i[1], i[2], i[3]), i[0]);
    StoreAt<__half>(p.dst.data, e, __float2half_rn(v));
  }
};

// One result element of a quantized mul_mat per row of work: the block's
// threads take a's row elements i = tid, tid + nt, ... (consecutive threads
// read consecutive elements of b: coalesced), dequantize and multiply
// them, and sum.
template <typename Format>
struct QuantDotOp {
  using Args = QuantDotArgs;
  static FERRY_HD int64_t Rows(const Args& p) { return NumElements(p.dst); }
  template <typename Block>
  static FERRY_HD void Apply(const Args& p, int64_t row, Block& block) {
    const int64_t i0 = row % p.dst.ne[0];
    int64_t i1, i2, i3;
    UnflattenRow(row / p.dst.ne[0], p.dst.ne, i1, i2, i3);
    const char* a_row = RowPtr(p.a, i0, i2 / p.r2, i3 / p.r3);
    const F32Row b_row{RowPtr(p.b, i1, i2, i3)};
    const int64_t k = p.a.ne[0];
    float sum = 0.0f;
    for (int64_t c = block.tid; c < k; c += block.nt) {
      sum += QuantElement<Format>(a_row, c) * b_row[c];
    }
    sum = block.Sum(sum);
    if (block.tid == 0) Store<float>(ElementPtr(p.dst, i0, i1, i2, i3), sum);
  }
};

// The block-wide reduction of the row kernels: a butterfly over the 32
// lanes of each warp (shuffles), lane 0 of each warp stores its warp's
// result in `shared` (32 floats), a barrier, every thread combines the
// warps' results, and a barrier before `shared` is used again. Every thread
// of the block must call it (barriers), with nt a multiple of 32. `sync`
// supplies ShflXor(v, lane_mask) and SyncThreads().
#pragma nv_exec_check_disable
template <typename Sync>
FERRY_HD float BlockReduce(float v, bool max, int64_t tid, int64_t nt,
                           float* shared, Sync& sync) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = sync.ShflXor(v, offset);
    v = max ? fmaxf(v, other) : v + other;
  }
  const int warp = static_cast<int>(tid / 32);
  const int warps = static_cast<int>((nt + 31) / 32);
  if (tid % 32 == 0) shared[warp] = v;
  sync.SyncThreads();
  float total = shared[0];
  for (int w = 1; w < warps; ++w) {
    total = max ? fmaxf(total, shared[w]) : total + shared[w];
  }
  sync.SyncThreads();  // shared is free again for the next reduction.
  return total;
}

// The Block of row ops over a Sync (BlockReduce).
template <typename Sync>
struct SyncBlock {
  int64_t tid;
  int64_t nt;
  float* shared;  // 32 floats, one array per block.
  Sync* sync;
  FERRY_HD float Sum(float v) const {
    return BlockReduce(v, false, tid, nt, shared, *sync);
  }
  FERRY_HD float Max(float v) const {
    return BlockReduce(v, true, tid, nt, shared, *sync);
  }
};

// What one thread of an element kernel does: its grid-stride share.
template <typename Op>
FERRY_HD void RunElementThread(const typename Op::Args& args, int64_t count,
                               const GridPosition& at) {
  ForEachElement(at, count, [&](int64_t e) { Op::Apply(args, e); });
}

// What one thread of a row kernel does: its block's rows. Every thread of
// a block walks the same rows, so the reductions' barriers line up.
#pragma nv_exec_check_disable
template <typename Op, typename Block>
FERRY_HD void RunRowThread(const typename Op::Args& args, int64_t rows,
                           const GridPosition& at, Block& block) {
  ForEachRow(at, rows, [&](int64_t row) { Op::Apply(args, row, block); });
}

// The Block of a serial host run: one thread, reductions are identities.
struct SerialBlock {
  int64_t tid = 0;
  int64_t nt = 1;
  FERRY_HD float Sum(float v) const { return v; }
  FERRY_HD float Max(float v) const { return v; }
};

}  // namespace cuda_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_KERNEL_MATH_H_
