#include "ferry/graph/testing/reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/op.h"
#include "ferry/graph/ops.h"
#include "ferry/quant/dequantize.h"
#include "ferry/quant/quant_dtype.h"
#include "ferry/quant/quantize.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::testing {
namespace {

using Index = std::array<int64_t, kMaxDims>;

const std::byte* Address(const Tensor& t, const Index& i) {
  return static_cast<const std::byte*>(t.data) + i[0] * t.nb[0] +
         i[1] * t.nb[1] + i[2] * t.nb[2] + i[3] * t.nb[3];
}

double Load(const Tensor& t, const Index& i) {
  const std::byte* p = Address(t, i);
  switch (t.dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    }
    case DType::kF16: {
      Half v;
      std::memcpy(&v, p, sizeof(v));
      return F16ToF32(v);
    }
    case DType::kBF16: {
      BFloat16 v;
      std::memcpy(&v, p, sizeof(v));
      return BF16ToF32(v);
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    }
    default:  // Block types are read a row at a time (ForEachRow).
      break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void Store(Tensor& t, const Index& i, double value) {
  auto* p = const_cast<std::byte*>(Address(t, i));
  const float f = static_cast<float>(value);
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(p, &f, sizeof(f));
      return;
    case DType::kF16: {
      const Half h = F32ToF16(f);
      std::memcpy(p, &h, sizeof(h));
      return;
    }
    case DType::kBF16: {
      const BFloat16 b = F32ToBF16(f);
      std::memcpy(p, &b, sizeof(b));
      return;
    }
    case DType::kI32: {
      const auto v = static_cast<int32_t>(std::llround(value));
      std::memcpy(p, &v, sizeof(v));
      return;
    }
    default:  // Block types are written a row at a time (ForEachRow).
      return;
  }
}

// Calls fn(index) for every index of `ne` in logical order (i0 fastest).
template <typename Fn>
void ForEachIndex(const Index& ne, Fn fn) {
  Index i;
  for (i[3] = 0; i[3] < ne[3]; ++i[3]) {
    for (i[2] = 0; i[2] < ne[2]; ++i[2]) {
      for (i[1] = 0; i[1] < ne[1]; ++i[1]) {
        for (i[0] = 0; i[0] < ne[0]; ++i[0]) fn(i);
      }
    }
  }
}

absl::Status CheckData(const Tensor& t, absl::string_view what) {
  if (t.data == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reference: ", what, " ", t.DebugString(), " has no data"));
  }
  if (IsQuantized(t.dtype) && !t.HasContiguousRows()) {
    return absl::UnimplementedError(
        absl::StrCat("reference: ", what, " ", t.DebugString(),
                     " of a block type needs contiguous rows"));
  }
  return absl::OkStatus();
}

// Calls fn(row address, row index) for each row of t in logical order.
template <typename Fn>
void ForEachRow(const Tensor& t, Fn fn) {
  const Index rows = {1, t.ne[1], t.ne[2], t.ne[3]};
  ForEachIndex(rows, [&](const Index& i) { fn(Address(t, i)); });
}

// The values of block-typed t in logical order, dequantized.
std::vector<float> Dequantized(const Tensor& t) {
  std::vector<float> values(static_cast<size_t>(t.NumElements()));
  float* row = values.data();
  ForEachRow(t, [&](const std::byte* p) {
    // Cannot fail: every block type has a dequantizer, ne[0] whole blocks.
    (void)quant::DequantizeRow(quant::QuantTypeOf(t.dtype), p, row, t.ne[0]);
    row += t.ne[0];
  });
  return values;
}

// Stores `values` (logical order) into block-typed t, quantizing each row
// with the reference quantizer.
void Quantize(Tensor& t, absl::Span<const float> values) {
  const float* row = values.data();
  ForEachRow(t, [&](const std::byte* p) {
    (void)quant::QuantizeRow(quant::QuantTypeOf(t.dtype), row,
                             const_cast<std::byte*>(p), t.ne[0]);
    row += t.ne[0];
  });
}

// A contiguous f32 tensor with t's shape and dequantized values, owned
// with its memory.
struct DequantizedTensor {
  explicit DequantizedTensor(const Tensor& t) : values(Dequantized(t)) {
    tensor.dtype = DType::kF32;
    tensor.ne = t.ne;
    tensor.nb = ContiguousStrides(DType::kF32, t.ne);
    tensor.name = t.name;
    tensor.data = values.data();
  }
  std::vector<float> values;
  Tensor tensor;
};

// Reads t's elements in logical order.
std::vector<double> LoadAll(const Tensor& t) {
  std::vector<double> values;
  values.reserve(static_cast<size_t>(t.NumElements()));
  ForEachIndex(t.ne, [&](const Index& i) { values.push_back(Load(t, i)); });
  return values;
}

// Writes `values` (logical order) into t.
void StoreAll(Tensor& t, const std::vector<double>& values) {
  size_t k = 0;
  ForEachIndex(t.ne, [&](const Index& i) { Store(t, i, values[k++]); });
}

// Offset of index i in a contiguous logical array of shape ne.
int64_t Flat(const Index& ne, const Index& i) {
  return i[0] + ne[0] * (i[1] + ne[1] * (i[2] + ne[2] * i[3]));
}

double Gelu(double x) {
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

absl::Status Compute(Tensor& node, std::vector<double>& out) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  const Index& ne = node.ne;
  switch (node.op) {
    case Op::kMulMat: {
      const int64_t r2 = b->ne[2] / a->ne[2];
      const int64_t r3 = b->ne[3] / a->ne[3];
      ForEachIndex(ne, [&](const Index& i) {
        double sum = 0;
        for (int64_t k = 0; k < a->ne[0]; ++k) {
          sum += Load(*a, {k, i[0], i[2] / r2, i[3] / r3}) *
                 Load(*b, {k, i[1], i[2], i[3]});
        }
        out[Flat(ne, i)] = sum;
      });
      return absl::OkStatus();
    }
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv: {
      ForEachIndex(ne, [&](const Index& i) {
        const double x = Load(*a, i);
        const double y = Load(*b, {i[0] % b->ne[0], i[1] % b->ne[1],
                                   i[2] % b->ne[2], i[3] % b->ne[3]});
        double r = 0;
        switch (node.op) {
          case Op::kAdd:
            r = x + y;
            break;
          case Op::kSub:
            r = x - y;
            break;
          case Op::kMul:
            r = x * y;
            break;
          default:
            r = x / y;
            break;
        }
        out[Flat(ne, i)] = r;
      });
      return absl::OkStatus();
    }
    case Op::kScale:
    case Op::kSilu:
    case Op::kGelu:
    case Op::kRelu:
    case Op::kTanh: {
      const double s = node.ParamF32(0);
      ForEachIndex(ne, [&](const Index& i) {
        const double x = Load(*a, i);
        double r = 0;
        switch (node.op) {
          case Op::kScale:
            r = x * s;
            break;
          case Op::kSilu:
            r = x / (1.0 + std::exp(-x));
            break;
          case Op::kGelu:
            r = Gelu(x);
            break;
          case Op::kTanh:
            r = std::tanh(x);
            break;
          default:
            r = x > 0 ? x : 0.0;
            break;
        }
        out[Flat(ne, i)] = r;
      });
      return absl::OkStatus();
    }
    case Op::kRmsNorm:
    case Op::kNorm: {
      const double eps = node.ParamF32(0);
      ForEachIndex({1, ne[1], ne[2], ne[3]}, [&](const Index& row) {
        Index i = row;
        double mean = 0;
        if (node.op == Op::kNorm) {
          for (i[0] = 0; i[0] < ne[0]; ++i[0]) mean += Load(*a, i);
          mean /= static_cast<double>(ne[0]);
        }
        double sum_sq = 0;
        for (i[0] = 0; i[0] < ne[0]; ++i[0]) {
          const double d = Load(*a, i) - mean;
          sum_sq += d * d;
        }
        const double inv =
            1.0 / std::sqrt(sum_sq / static_cast<double>(ne[0]) + eps);
        for (i[0] = 0; i[0] < ne[0]; ++i[0]) {
          out[Flat(ne, i)] = (Load(*a, i) - mean) * inv;
        }
      });
      return absl::OkStatus();
    }
    case Op::kSoftMax: {
      const double scale = node.ParamF32(0);
      std::vector<double> row_values(static_cast<size_t>(ne[0]));
      ForEachIndex({1, ne[1], ne[2], ne[3]}, [&](const Index& row) {
        Index i = row;
        double max = -std::numeric_limits<double>::infinity();
        for (i[0] = 0; i[0] < ne[0]; ++i[0]) {
          double v = Load(*a, i) * scale;
          if (b != nullptr) {
            v += Load(*b, {i[0], i[1], i[2] % b->ne[2], i[3] % b->ne[3]});
          }
          row_values[static_cast<size_t>(i[0])] = v;
          max = std::max(max, v);
        }
        double sum = 0;
        for (double& v : row_values) {
          v = std::exp(v - max);
          sum += v;
        }
        for (i[0] = 0; i[0] < ne[0]; ++i[0]) {
          out[Flat(ne, i)] = row_values[static_cast<size_t>(i[0])] / sum;
        }
      });
      return absl::OkStatus();
    }
    case Op::kRope: {
      const int64_t n_dims = node.ParamI32(0);
      const bool neox =
          node.ParamI32(1) == static_cast<int32_t>(RopeMode::kNeox);
      const double base = node.ParamF32(2);
      const double freq_scale = node.ParamF32(3);
      ForEachIndex(ne, [&](const Index& i) { out[Flat(ne, i)] = Load(*a, i); });
      ForEachIndex({1, ne[1], ne[2], ne[3]}, [&](const Index& row) {
        const double p = Load(*b, {row[2], 0, 0, 0});
        const Tensor* factors = node.src[2];
        for (int64_t k = 0; k < n_dims / 2; ++k) {
          const double factor =
              factors != nullptr ? Load(*factors, {k, 0, 0, 0}) : 1.0;
          const double theta = p * freq_scale / factor *
                               std::pow(base, -2.0 * static_cast<double>(k) /
                                                  static_cast<double>(n_dims));
          Index i0 = row;
          Index i1 = row;
          i0[0] = neox ? k : 2 * k;
          i1[0] = neox ? k + n_dims / 2 : 2 * k + 1;
          const double x0 = Load(*a, i0);
          const double x1 = Load(*a, i1);
          out[Flat(ne, i0)] = x0 * std::cos(theta) - x1 * std::sin(theta);
          out[Flat(ne, i1)] = x0 * std::sin(theta) + x1 * std::cos(theta);
        }
      });
      return absl::OkStatus();
    }
    case Op::kGetRows: {
      absl::Status status;
      ForEachIndex(ne, [&](const Index& i) {
        const auto id = static_cast<int64_t>(Load(*b, {i[1], i[2], i[3], 0}));
        if (id < 0 || id >= a->ne[1]) {
          if (status.ok()) {
            status = absl::OutOfRangeError(absl::StrCat(
                "reference: get_rows id ", id, " at [", i[1], ", ", i[2], ", ",
                i[3], "] outside [0, ", a->ne[1], ")"));
          }
          return;
        }
        out[Flat(ne, i)] = Load(*a, {i[0], id, i[2], i[3]});
      });
      return status;
    }
    case Op::kCpy:
    case Op::kCont:
      out = LoadAll(*a);
      return absl::OkStatus();
    case Op::kSetRows: {
      // a: rows [E, N]; b: ids [N]; node aliases dst and keeps its rows.
      out = LoadAll(node);
      std::vector<bool> written(static_cast<size_t>(ne[1]), false);
      for (int64_t n = 0; n < a->ne[1]; ++n) {
        const auto id = static_cast<int64_t>(Load(*b, {n, 0, 0, 0}));
        if (id == -1) continue;  // A row that goes nowhere (padding).
        if (id < 0 || id >= ne[1]) {
          return absl::OutOfRangeError(
              absl::StrCat("reference: set_rows id ", id, " at [", n,
                           "] outside [0, ", ne[1], ")"));
        }
        if (written[static_cast<size_t>(id)]) {
          return absl::InvalidArgumentError(absl::StrCat(
              "reference: set_rows id ", id, " at [", n, "] repeated"));
        }
        written[static_cast<size_t>(id)] = true;
        for (int64_t e = 0; e < ne[0]; ++e) {
          out[Flat(ne, {e, id, 0, 0})] = Load(*a, {e, n, 0, 0});
        }
      }
      return absl::OkStatus();
    }
    case Op::kRangeAttention: {
      const Tensor& k = *node.src[1];
      const Tensor& v = *node.src[2];
      const Tensor& ranges = *node.src[3];
      const int64_t hd = ne[0];
      const int64_t group = ne[1] / (k.ne[0] / hd);
      const double scale = node.ParamF32(0);
      // An f16 cache multiplies f16 values: q and the weights rounded.
      const bool f16 = k.dtype == DType::kF16;
      const auto operand = [f16](double x) {
        return f16 ? static_cast<double>(
                         F16ToF32(F32ToF16(static_cast<float>(x))))
                   : x;
      };
      out.assign(out.size(), 0.0);
      for (int64_t t = 0; t < ne[2]; ++t) {
        const auto begin = static_cast<int64_t>(Load(ranges, {0, t, 0, 0}));
        const auto end = static_cast<int64_t>(Load(ranges, {1, t, 0, 0}));
        if (begin < 0 || end < begin || end > k.ne[1]) {
          return absl::OutOfRangeError(absl::StrCat(
              "reference: range_attention range [", begin, ", ", end,
              ") of token ", t, " outside [0, ", k.ne[1], "]"));
        }
        for (int64_t h = 0; h < ne[1]; ++h) {
          const int64_t kv0 = h / group * hd;
          std::vector<double> p;
          double max = -INFINITY;
          for (int64_t r = begin; r < end; ++r) {
            double s = 0;
            for (int64_t e = 0; e < hd; ++e) {
              s +=
                  operand(Load(*a, {e, h, t, 0})) * Load(k, {kv0 + e, r, 0, 0});
            }
            p.push_back(s * scale);
            max = std::max(max, p.back());
          }
          double sum = 0;
          for (double& x : p) sum += (x = std::exp(x - max));
          for (int64_t r = begin; r < end; ++r) {
            const double w = operand(p[static_cast<size_t>(r - begin)] / sum);
            for (int64_t e = 0; e < hd; ++e) {
              out[Flat(ne, {e, h, t, 0})] += w * Load(v, {kv0 + e, r, 0, 0});
            }
          }
        }
      }
      return absl::OkStatus();
    }
    case Op::kConcat: {
      const int dim = node.ParamI32(0);
      ForEachIndex(ne, [&](const Index& i) {
        if (i[dim] < a->ne[dim]) {
          out[Flat(ne, i)] = Load(*a, i);
        } else {
          Index j = i;
          j[dim] -= a->ne[dim];
          out[Flat(ne, i)] = Load(*b, j);
        }
      });
      return absl::OkStatus();
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("reference: op ", OpName(node.op), " not supported"));
  }
}

}  // namespace

absl::Status EvaluateReferenceNode(Tensor& node) {
  if (node.data == nullptr && node.view_src != nullptr &&
      node.view_src->data != nullptr) {
    node.data = static_cast<std::byte*>(node.view_src->data) + node.view_offset;
  }
  FERRY_RETURN_IF_ERROR(CheckData(node, "node"));
  if (node.op == Op::kNone || IsViewOp(node.op)) return absl::OkStatus();
  for (const Tensor* src : node.src) {
    if (src != nullptr) FERRY_RETURN_IF_ERROR(CheckData(*src, "source"));
  }
  if (IsQuantized(node.dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        "reference: ", node.DebugString(), ": no op computes a block type"));
  }
  // Block-typed sources are dequantized first: the reference computes on
  // the values the blocks stand for.
  Tensor computed = node;
  std::vector<std::unique_ptr<DequantizedTensor>> dequantized;
  for (Tensor*& src : computed.src) {
    if (src == nullptr || !IsQuantized(src->dtype)) continue;
    dequantized.push_back(std::make_unique<DequantizedTensor>(*src));
    src = &dequantized.back()->tensor;
  }
  std::vector<double> out(static_cast<size_t>(node.NumElements()));
  FERRY_RETURN_IF_ERROR(Compute(computed, out));
  StoreAll(node, out);
  return absl::OkStatus();
}

absl::Status EvaluateReference(const Graph& graph) {
  for (Tensor* leaf : graph.leafs()) {
    FERRY_RETURN_IF_ERROR(CheckData(*leaf, "leaf"));
  }
  for (Tensor* node : graph.nodes()) {
    FERRY_RETURN_IF_ERROR(EvaluateReferenceNode(*node));
  }
  return absl::OkStatus();
}

absl::Status FillRandom(Tensor& t, uint64_t seed, float lo, float hi) {
  FERRY_RETURN_IF_ERROR(CheckData(t, "tensor"));
  if (!(lo < hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FillRandom: need lo < hi, got [", lo, ", ", hi, ")"));
  }
  std::mt19937_64 engine(seed);
  std::vector<float> quantized;  // Block types: values, quantized at the end.
  ForEachIndex(t.ne, [&](const Index& i) {
    // 53 random bits -> [0, 1), identical on every standard library.
    const double u = static_cast<double>(engine() >> 11) * 0x1.0p-53;
    double value = lo + (static_cast<double>(hi) - lo) * u;
    if (t.dtype == DType::kI32) value = std::floor(value);
    if (IsQuantized(t.dtype)) {
      quantized.push_back(static_cast<float>(value));
    } else {
      Store(t, i, value);
    }
  });
  if (IsQuantized(t.dtype)) Quantize(t, quantized);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ReadTensor(const Tensor& t) {
  FERRY_RETURN_IF_ERROR(CheckData(t, "tensor"));
  if (IsQuantized(t.dtype)) return Dequantized(t);
  std::vector<float> values;
  values.reserve(static_cast<size_t>(t.NumElements()));
  ForEachIndex(t.ne, [&](const Index& i) {
    values.push_back(static_cast<float>(Load(t, i)));
  });
  return values;
}

absl::Status WriteTensor(Tensor& t, absl::Span<const float> values) {
  FERRY_RETURN_IF_ERROR(CheckData(t, "tensor"));
  if (static_cast<int64_t>(values.size()) != t.NumElements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteTensor: ", values.size(), " values for ", t.DebugString()));
  }
  if (IsQuantized(t.dtype)) {
    Quantize(t, values);
    return absl::OkStatus();
  }
  size_t k = 0;
  ForEachIndex(t.ne, [&](const Index& i) { Store(t, i, values[k++]); });
  return absl::OkStatus();
}

double Nmse(absl::Span<const float> expected, absl::Span<const float> actual) {
  if (expected.size() != actual.size()) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  double err = 0;
  double norm = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double d = static_cast<double>(actual[i]) - expected[i];
    err += d * d;
    norm += static_cast<double>(expected[i]) * expected[i];
  }
  if (err == 0) return 0;
  return err / norm;
}

}  // namespace ferry::testing
