// The block formats of quant/block_formats.h as the CUDA kernels read them
// (QuantDotOp and DequantOp in kernel_math.h take any of them).
//
// A format is a struct with
//   static constexpr int kBlock;   // Elements per block.
//   static constexpr int kBytes;   // Bytes per block.
//   static float Value(const char* block, int j);  // Element j < kBlock.
// Value computes element j alone, with the same float operations as the
// CPU's dequantizer (quant/dequantize.cc, quant/internal/dequantize_k.cc),
// so both see the same values. Byte offsets are those of the packed structs
// of block_formats.h; multi-byte fields go through Load (a row may start at
// any byte address). Extension point: a new format is a struct here, its
// ElemType (desc.h) and a case in DispatchQuantType.
//
// nvcc only: include it from .cu files.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_QUANT_FORMATS_H_
#define FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_QUANT_FORMATS_H_

#ifndef __CUDACC__
#error "quant_formats.h is CUDA code: include it only from .cu files"
#endif

#include <cuda_fp16.h>

#include <cstdint>

#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/kernel_math.h"

namespace ferry {
namespace cuda_kernels_internal {

FERRY_HD float HalfBitsToFloat(const char* p) {
  __half_raw raw;
  raw.x = Load<uint16_t>(p);
  return __half2float(__half(raw));
}

FERRY_HD int ByteAt(const char* p, int i) { return static_cast<uint8_t>(p[i]); }

// Element j of 32 nibbles ordered as q4_0's: the low half of byte j (j <
// 16), else the high half of byte j - 16.
FERRY_HD int Nibble32(const char* qs, int j) {
  const int byte = ByteAt(qs, j & 15);
  return j < 16 ? (byte & 0x0F) : (byte >> 4);
}

// The iq4 grid (quant::kIq4NlValues): a local table, which device code can
// index (a namespace-scope host array it could not).
FERRY_HD float Iq4Value(int q) {
  const int8_t values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                             1,    13,   25,  38,  53,  69,  89,  113};
  return static_cast<float>(values[q]);
}

// ---------------------------------------------------------------------------
// 32-element blocks.

struct Q4_0Format {
  static constexpr int kBlock = 32;
  static constexpr int kBytes = 18;  // f16 d, 16 bytes of nibbles.
  static FERRY_HD float Value(const char* block, int j) {
    const float d = HalfBitsToFloat(block);
    return d * static_cast<float>(Nibble32(block + 2, j) - 8);
  }
};

struct Q4_1Format {
  static constexpr int kBlock = 32;
  static constexpr int kBytes = 20;  // f16 d, f16 m, 16 bytes of nibbles.
  static FERRY_HD float Value(const char* block, int j) {
    const float d = HalfBitsToFloat(block);
    const float m = HalfBitsToFloat(block + 2);
    return d * static_cast<float>(Nibble32(block + 4, j)) + m;
  }
};

// q5_0 / q5_1: a nibble plus bit j of the little-endian u32 qh.
FERRY_HD int Quint32(const char* qh, const char* qs, int j) {
  const uint32_t high = Load<uint32_t>(qh);
  return Nibble32(qs, j) | static_cast<int>(((high >> j) & 1) << 4);
}

struct Q5_0Format {
  static constexpr int kBlock = 32;
  static constexpr int kBytes = 22;  // f16 d, u32 qh, 16 bytes of nibbles.
  static FERRY_HD float Value(const char* block, int j) {
    const float d = HalfBitsToFloat(block);
    return d * static_cast<float>(Quint32(block + 2, block + 6, j) - 16);
  }
};

struct Q5_1Format {
  static constexpr int kBlock = 32;
  static constexpr int kBytes = 24;  // f16 d, f16 m, u32 qh, nibbles.
  static FERRY_HD float Value(const char* block, int j) {
    const float d = HalfBitsToFloat(block);
    const float m = HalfBitsToFloat(block + 2);
    return d * static_cast<float>(Quint32(block + 4, block + 8, j)) + m;
  }
};

struct Q8_0Format {
  static constexpr int kBlock = 32;
  static constexpr int kBytes = 34;  // f16 d, 32 signed bytes.
  static FERRY_HD float Value(const char* block, int j) {
    const float d = HalfBitsToFloat(block);
    return d * static_cast<float>(static_cast<int8_t>(block[2 + j]));
  }
};

struct IQ4_NLFormat {
  static constexpr int kBlock = 32;
  static constexpr int kBytes = 18;  // f16 d, 16 bytes of grid indices.
  static FERRY_HD float Value(const char* block, int j) {
    const float d = HalfBitsToFloat(block);
    return d * Iq4Value(Nibble32(block + 2, j));
  }
};

// ---------------------------------------------------------------------------
// 256-element super-blocks (the K formats). For q2_K, q3_K and q6_K element
// e = 128 h + 32 g + l (h < 2, g < 4, l < 32).

struct Q2_KFormat {
  static constexpr int kBlock = 256;
  // scales[16] (4-bit scale, 4-bit minimum), qs[64], f16 d, f16 dmin.
  static constexpr int kBytes = 84;
  static FERRY_HD float Value(const char* block, int e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    const float d = HalfBitsToFloat(block + 80);
    const float dmin = HalfBitsToFloat(block + 82);
    const int q = (ByteAt(block + 16, 32 * h + l) >> (2 * g)) & 3;
    const int sc = ByteAt(block, e / 16);
    const float dl = d * static_cast<float>(sc & 0x0F);
    const float ml = dmin * static_cast<float>(sc >> 4);
    return dl * static_cast<float>(q) - ml;
  }
};

struct Q3_KFormat {
  static constexpr int kBlock = 256;
  // hmask[32], qs[64], scales[12] (16 six-bit scales), f16 d.
  static constexpr int kBytes = 110;
  static FERRY_HD float Value(const char* block, int e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    const float d = HalfBitsToFloat(block + 108);
    const char* scales = block + 96;
    const int s = e / 16;
    const int low_sc =
        s < 8 ? ByteAt(scales, s) & 0x0F : ByteAt(scales, s - 8) >> 4;
    const int high_sc = (ByteAt(scales, 8 + s % 4) >> (2 * (s / 4))) & 3;
    const int sc = (low_sc | (high_sc << 4)) - 32;
    const int low = (ByteAt(block + 32, 32 * h + l) >> (2 * g)) & 3;
    const int high = (ByteAt(block, l) >> (4 * h + g)) & 1;
    const float dl = d * static_cast<float>(sc);
    return dl * static_cast<float>(low + 4 * high - 4);
  }
};

// q4_K / q5_K: sub-block s < 8's six-bit scale and minimum from the 12
// bytes at `p` (quant/internal/k_scales.h's UnpackScaleMinK4, one of them).
FERRY_HD void ScaleMinK4(const char* p, int s, int& sc, int& m) {
  if (s < 4) {
    sc = ByteAt(p, s) & 63;
    m = ByteAt(p, s + 4) & 63;
  } else {
    sc = (ByteAt(p, s + 4) & 0x0F) | ((ByteAt(p, s - 4) >> 6) << 4);
    m = (ByteAt(p, s + 4) >> 4) | ((ByteAt(p, s) >> 6) << 4);
  }
}

// Element e = 64 c + 32 s + l of a q4_K / q5_K nibble array.
FERRY_HD int NibbleK(const char* qs, int e) {
  return (ByteAt(qs, 32 * (e / 64) + e % 32) >> (4 * ((e / 32) % 2))) & 0x0F;
}

// x = d * sc * q - dmin * m, with sub-block e / 32's scale and minimum.
FERRY_HD float ScaleMinValue(const char* block, int e, int q) {
  const float d = HalfBitsToFloat(block);
  const float dmin = HalfBitsToFloat(block + 2);
  int sc, m;
  ScaleMinK4(block + 4, e / 32, sc, m);
  const float d1 = d * static_cast<float>(sc);
  const float m1 = dmin * static_cast<float>(m);
  return d1 * static_cast<float>(q) - m1;
}

struct Q4_KFormat {
  static constexpr int kBlock = 256;
  static constexpr int kBytes = 144;  // f16 d, f16 dmin, scales[12], qs[128].
  static FERRY_HD float Value(const char* block, int e) {
    return ScaleMinValue(block, e, NibbleK(block + 16, e));
  }
};

struct Q5_KFormat {
  static constexpr int kBlock = 256;
  // f16 d, f16 dmin, scales[12], qh[32], qs[128].
  static constexpr int kBytes = 176;
  static FERRY_HD float Value(const char* block, int e) {
    const int high = (ByteAt(block + 16, e % 32) >> (e / 32)) & 1;
    return ScaleMinValue(block, e, NibbleK(block + 48, e) | (high << 4));
  }
};

struct Q6_KFormat {
  static constexpr int kBlock = 256;
  // ql[128], qh[64], int8 scales[16], f16 d.
  static constexpr int kBytes = 210;
  static FERRY_HD float Value(const char* block, int e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    const float d = HalfBitsToFloat(block + 208);
    const int low =
        (ByteAt(block, 64 * h + 32 * (g % 2) + l) >> (4 * (g / 2))) & 0x0F;
    const int high = (ByteAt(block + 128, 32 * h + l) >> (2 * g)) & 3;
    const int sc = static_cast<int8_t>(block[192 + e / 16]);
    const float dl = d * static_cast<float>(sc);
    return dl * static_cast<float>((low | (high << 4)) - 32);
  }
};

struct IQ4_XSFormat {
  static constexpr int kBlock = 256;
  // f16 d, u16 scales_h, scales_l[4], qs[128] (8 sub-blocks of 32).
  static constexpr int kBytes = 136;
  static FERRY_HD float Value(const char* block, int e) {
    const int s = e / 32;
    const float d = HalfBitsToFloat(block);
    const int low = (ByteAt(block + 4, s / 2) >> (4 * (s % 2))) & 0x0F;
    const int high = (Load<uint16_t>(block + 2) >> (2 * s)) & 3;
    const float dl = d * static_cast<float>((low | (high << 4)) - 32);
    return dl * Iq4Value(Nibble32(block + 8 + 16 * s, e % 32));
  }
};

// Calls fn(TypeTag<Format>{}) for a block-quantized `type`; false (fn not
// called) for another type.
template <typename Fn>
bool DispatchQuantType(ElemType type, Fn&& fn) {
  switch (type) {
    case ElemType::kQ4_0:
      fn(TypeTag<Q4_0Format>{});
      return true;
    case ElemType::kQ4_1:
      fn(TypeTag<Q4_1Format>{});
      return true;
    case ElemType::kQ5_0:
      fn(TypeTag<Q5_0Format>{});
      return true;
    case ElemType::kQ5_1:
      fn(TypeTag<Q5_1Format>{});
      return true;
    case ElemType::kQ8_0:
      fn(TypeTag<Q8_0Format>{});
      return true;
    case ElemType::kQ2_K:
      fn(TypeTag<Q2_KFormat>{});
      return true;
    case ElemType::kQ3_K:
      fn(TypeTag<Q3_KFormat>{});
      return true;
    case ElemType::kQ4_K:
      fn(TypeTag<Q4_KFormat>{});
      return true;
    case ElemType::kQ5_K:
      fn(TypeTag<Q5_KFormat>{});
      return true;
    case ElemType::kQ6_K:
      fn(TypeTag<Q6_KFormat>{});
      return true;
    case ElemType::kIQ4_NL:
      fn(TypeTag<IQ4_NLFormat>{});
      return true;
    case ElemType::kIQ4_XS:
      fn(TypeTag<IQ4_XSFormat>{});
      return true;
    default:
      return false;
  }
}

}  // namespace cuda_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_QUANT_FORMATS_H_
