#include "ferry/models/gguf/testing/gguf_builder.h"

#include <cstring>

namespace ferry::gguf::testing {
namespace {

template <typename T>
void Append(const T& v, std::string& out) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void AppendString(absl::string_view s, std::string& out) {
  Append<uint64_t>(s.size(), out);
  out.append(s.data(), s.size());
}

void AppendArray(const GgufArray& a, std::string& out) {
  Append<uint32_t>(static_cast<uint32_t>(a.element_type), out);
  Append<uint64_t>(a.size, out);
  if (a.element_type == GgufValueType::kString) {
    for (const std::string& s : a.strings) AppendString(s, out);
  } else if (a.element_type == GgufValueType::kArray) {
    for (const GgufArray& inner : a.arrays) AppendArray(inner, out);
  } else {
    out.append(reinterpret_cast<const char*>(a.scalars.data()),
               a.scalars.size());
  }
}

template <typename T>
GgufValue PackedArray(const std::vector<T>& values) {
  GgufArray a;
  a.element_type = GgufScalarTraits<T>::kType;
  a.size = values.size();
  a.scalars.resize(values.size() * sizeof(T));
  if (!values.empty()) {
    std::memcpy(a.scalars.data(), values.data(), a.scalars.size());
  }
  return GgufValue(GgufValue::Storage(std::move(a)));
}

}  // namespace

void AppendGgufValue(const GgufValue& value, std::string& out) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          AppendString(v, out);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          AppendArray(v, out);
        } else if constexpr (std::is_same_v<T, bool>) {
          Append<uint8_t>(v ? 1 : 0, out);
        } else {
          Append<T>(v, out);
        }
      },
      value.storage());
}

GgufBuilder& GgufBuilder::Set(std::string key, GgufValue value) {
  metadata_.emplace_back(std::move(key), std::move(value));
  return *this;
}
GgufBuilder& GgufBuilder::SetString(std::string key, std::string value) {
  return Set(std::move(key), GgufValue(GgufValue::Storage(std::move(value))));
}
GgufBuilder& GgufBuilder::SetU32(std::string key, uint32_t value) {
  return Set(std::move(key), GgufValue(GgufValue::Storage(value)));
}
GgufBuilder& GgufBuilder::SetF32(std::string key, float value) {
  return Set(std::move(key), GgufValue(GgufValue::Storage(value)));
}
GgufBuilder& GgufBuilder::SetBool(std::string key, bool value) {
  return Set(std::move(key), GgufValue(GgufValue::Storage(value)));
}
GgufBuilder& GgufBuilder::SetStrings(std::string key,
                                     std::vector<std::string> values) {
  GgufArray a;
  a.element_type = GgufValueType::kString;
  a.size = values.size();
  a.strings = std::move(values);
  return Set(std::move(key), GgufValue(GgufValue::Storage(std::move(a))));
}
GgufBuilder& GgufBuilder::SetF32s(std::string key,
                                  const std::vector<float>& values) {
  return Set(std::move(key), PackedArray(values));
}
GgufBuilder& GgufBuilder::SetI32s(std::string key,
                                  const std::vector<int32_t>& values) {
  return Set(std::move(key), PackedArray(values));
}

GgufBuilder& GgufBuilder::AddTensor(std::string name, std::vector<int64_t> dims,
                                    quant::QuantType type, std::string data) {
  tensors_.push_back({std::move(name), std::move(dims), type, std::move(data)});
  return *this;
}

std::string GgufBuilder::Build(uint32_t alignment) const {
  auto metadata = metadata_;
  if (alignment != 32) {
    metadata.emplace_back("general.alignment",
                          GgufValue(GgufValue::Storage(alignment)));
  }
  std::string out = "GGUF";
  Append<uint32_t>(3, out);
  Append<uint64_t>(tensors_.size(), out);
  Append<uint64_t>(metadata.size(), out);
  for (const auto& [key, value] : metadata) {
    AppendString(key, out);
    Append<uint32_t>(static_cast<uint32_t>(value.type()), out);
    AppendGgufValue(value, out);
  }
  auto align = [alignment](uint64_t n) {
    return (n + alignment - 1) / alignment * alignment;
  };
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    AppendString(t.name, out);
    Append<uint32_t>(static_cast<uint32_t>(t.dims.size()), out);
    for (int64_t d : t.dims) Append<uint64_t>(static_cast<uint64_t>(d), out);
    Append<uint32_t>(static_cast<uint32_t>(t.type), out);
    Append<uint64_t>(offset, out);
    offset = align(offset + t.data.size());
  }
  out.resize(align(out.size()), '\0');
  for (const Tensor& t : tensors_) {
    out += t.data;
    out.resize(align(out.size()), '\0');
  }
  return out;
}

}  // namespace ferry::gguf::testing
