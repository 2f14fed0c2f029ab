// Writes NumPy .npy files (format 1.0): a little-endian float32 array of a
// given shape, readable by numpy.load.
#ifndef FERRY_EXAMPLES_NPY_H_
#define FERRY_EXAMPLES_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ferry::examples {

// The bytes of a .npy file holding `values` with `shape` (C order).
// InvalidArgument if the shape's product is not values.size().
absl::Status EncodeNpy(absl::Span<const float> values,
                       absl::Span<const int64_t> shape, std::string* out);
absl::Status WriteNpy(const std::string& path, absl::Span<const float> values,
                      absl::Span<const int64_t> shape);

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_NPY_H_
