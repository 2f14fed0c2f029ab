// Loading and storing the f16 scale fields of quantized blocks.
#ifndef FERRY_QUANT_INTERNAL_SCALES_H_
#define FERRY_QUANT_INTERNAL_SCALES_H_

#include <cstdint>

#include "ferry/graph/dtype.h"

namespace ferry::quant::quant_internal {

inline float HalfToFloat(uint16_t bits) { return F16ToF32(Half{bits}); }
inline uint16_t FloatToHalf(float value) { return F32ToF16(value).bits; }

}  // namespace ferry::quant::quant_internal

#endif  // FERRY_QUANT_INTERNAL_SCALES_H_
