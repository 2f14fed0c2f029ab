#include "ferry/alloc/graph_signature.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

namespace ferry {
namespace {

// A process-wide counter: generations of different signatures never meet.
uint64_t NextGeneration() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void GraphSignature::Clear() {
  tensors_.clear();
  keys_.clear();
  wiring_.clear();
  externals_.clear();
  changed_.clear();
  compared_end_ = 0;
  num_nodes_ = 0;
  valid_ = false;
  unchanged_ = false;
  same_tensors_ = false;
  generation_ = NextGeneration();
}

int32_t GraphSignature::IndexOf(const Tensor* t) const {
  if (t == nullptr) return kNone;
  const int32_t k = t->scratch_index;
  return k >= 0 && static_cast<size_t>(k) < tensors_.size() && tensors_[k] == t
             ? k
             : kNone;
}

bool GraphSignature::KeyMatches(size_t i, const Tensor& t, bool preset,
                                bool computes) const {
  const Key& key = keys_[i];
  const Wiring& w = wiring_[i];
  // Sources are compared by pointer with the tensor at the recorded number
  // (tensors_ already holds the new graph): the same test as comparing
  // numbers, without reading the sources. Branch-free: this runs for every
  // tensor of every graph.
  auto tensor_at = [&](int32_t k) -> uintptr_t {
    return k >= 0
               ? reinterpret_cast<uintptr_t>(tensors_[static_cast<size_t>(k)])
               : 0;
  };
  const Buffer* buffer = preset ? t.buffer : nullptr;
  uint64_t diff =
      (static_cast<uint64_t>(key.op) ^ static_cast<uint64_t>(t.op)) |
      (static_cast<uint64_t>(key.dtype) ^ static_cast<uint64_t>(t.dtype)) |
      (key.flags ^ DescriptiveFlags(t)) |
      (static_cast<uint64_t>(key.preset) ^ static_cast<uint64_t>(preset)) |
      static_cast<uint64_t>(key.view_offset ^ t.view_offset) |
      (reinterpret_cast<uintptr_t>(key.buffer) ^
       reinterpret_cast<uintptr_t>(buffer)) |
      (tensor_at(w.view_src) ^ reinterpret_cast<uintptr_t>(t.view_src));
  for (int j = 0; j < kMaxSrc; ++j) {
    diff |= tensor_at(w.src[j]) ^ reinterpret_cast<uintptr_t>(t.src[j]);
  }
  for (int d = 0; d < kMaxDims; ++d) {
    diff |= static_cast<uint64_t>(key.ne[d] ^ t.ne[d]) |
            static_cast<uint64_t>(key.nb[d] ^ t.nb[d]);
  }
  // A view's params are its shape, strides and offset; only nodes that
  // compute have params of their own.
  if (computes) {
    for (int p = 0; p < kMaxOpParams; ++p) {
      diff |= static_cast<uint32_t>(key.op_params[p] ^ t.op_params[p]);
    }
  }
  if (buffer != nullptr) {
    diff |= (reinterpret_cast<uintptr_t>(key.buffer_type) ^
             reinterpret_cast<uintptr_t>(buffer->type())) |
            (static_cast<uint64_t>(key.usage) ^
             static_cast<uint64_t>(buffer->usage()));
  }
  if (diff != 0) return false;
  // External sources (rare) are compared by identity.
  if (w.view_src == kExternal ||
      std::find(w.src.begin(), w.src.end(), kExternal) != w.src.end()) {
    for (const auto& [slot, ext] : externals_) {
      if (slot / (kMaxSrc + 1) != i) continue;
      const size_t j = slot % (kMaxSrc + 1);
      if ((j == kMaxSrc ? t.view_src : t.src[j]) != ext) return false;
    }
  }
  return true;
}

void GraphSignature::WriteKey(size_t i, const Tensor& t, bool preset,
                              bool computes) {
  Key& key = keys_[i];
  Wiring& w = wiring_[i];
  const Buffer* buffer = preset ? t.buffer : nullptr;
  key.op = t.op;
  key.dtype = t.dtype;
  key.preset = preset;
  key.flags = DescriptiveFlags(t);
  key.ne = t.ne;
  key.nb = t.nb;
  key.view_offset = t.view_offset;
  key.buffer = buffer;
  key.buffer_type = buffer != nullptr ? buffer->type() : nullptr;
  key.usage = buffer != nullptr ? buffer->usage() : BufferUsage::kAny;
  key.op_params = computes ? t.op_params : std::array<int32_t, kMaxOpParams>{};
  externals_.erase(std::remove_if(externals_.begin(), externals_.end(),
                                  [&](const auto& e) {
                                    return e.first / (kMaxSrc + 1) == i;
                                  }),
                   externals_.end());
  auto number = [&](const Tensor* u, size_t slot) -> int32_t {
    if (u == nullptr) return kNone;
    const int32_t k = IndexOf(u);
    if (k != kNone) return k;
    externals_.emplace_back(i * (kMaxSrc + 1) + slot, u);
    return kExternal;
  };
  w.view_src = number(t.view_src, kMaxSrc);
  for (int j = 0; j < kMaxSrc; ++j) w.src[j] = number(t.src[j], j);
  w.owner = w.view_src >= 0 ? w.view_src : static_cast<int32_t>(i);
  w.kind = 0;
  if (computes) w.kind |= kKindComputes;
  if (IsViewOp(t.op)) w.kind |= kKindViewOp;
  if (t.op == Op::kNone && t.HasFlag(kTensorFlagInput)) {
    w.kind |= kKindUserInput;
  }
  if (buffer != nullptr &&
      (key.usage == BufferUsage::kWeights || t.HasFlag(kTensorFlagWeight))) {
    w.kind |= kKindWeight;
  }
}

absl::Status GraphSignature::Update(const Graph& graph) {
  const size_t n_nodes = static_cast<size_t>(graph.num_nodes());
  const size_t n = n_nodes + static_cast<size_t>(graph.num_leafs());
  // The previous keys can be compared position by position.
  const bool comparable =
      valid_ && tensors_.size() == n && num_nodes_ == n_nodes;
  bool match = comparable;
  bool same_tensors = comparable;
  tensors_.resize(n);
  keys_.resize(n);
  wiring_.resize(n);
  changed_.assign(n, 0);
  num_nodes_ = n_nodes;
  for (size_t i = 0; i < n; ++i) {
    Tensor* t = i < n_nodes ? graph.node(static_cast<int64_t>(i))
                            : graph.leafs()[i - n_nodes];
    same_tensors = same_tensors && tensors_[i] == t;
    tensors_[i] = t;
  }
  if (!comparable) externals_.clear();
  // Keys that differ are rewritten, which needs every tensor's number;
  // until then each tensor is numbered as it is compared.
  size_t numbered = 0;  // tensors_[0, numbered) carry their number.
  bool comparing = comparable;
  compared_end_ = comparable ? n : 0;
  size_t n_changed = 0;
  for (size_t i = 0; i < n; ++i) {
    Tensor& t = *tensors_[i];
    if (numbered <= i) {
      // Usually right already: reading keeps the cache line clean.
      if (t.scratch_index != static_cast<int32_t>(i)) {
        t.scratch_index = static_cast<int32_t>(i);
      }
      numbered = i + 1;
    }
    // Memory a graph allocator placed (ours or another's, which may be
    // gone) is placed again: it is not part of the signature and its buffer
    // must not be read.
    const bool preset = HasPresetMemory(t);
    const bool computes = IsComputeOp(t.op);
    if (comparing && KeyMatches(i, t, preset, computes)) continue;
    match = false;
    changed_[i] = 1;
    // Most of a different graph differs: stop comparing (the rest counts
    // as changed) rather than compare and then rewrite.
    if (comparing && ++n_changed * 4 > i + 1 && i >= 64) {
      comparing = false;
      compared_end_ = i + 1;
    }
    if (numbered < n) {
      for (size_t k = numbered; k < n; ++k) {
        tensors_[k]->scratch_index = static_cast<int32_t>(k);
      }
      numbered = n;
    }
    WriteKey(i, t, preset, computes);
  }
  valid_ = true;
  unchanged_ = match;
  same_tensors_ = match && same_tensors;
  if (!match) generation_ = NextGeneration();
  return absl::OkStatus();
}

bool GraphSignature::SameContent(const GraphSignature& other) const {
  if (tensors_.size() != other.tensors_.size() ||
      num_nodes_ != other.num_nodes_ || externals_ != other.externals_) {
    return false;
  }
  // Keys and wiring are written field by field into value-initialized
  // (zero-padded) storage and copied as bytes, so bytes compare.
  static_assert(std::is_trivially_copyable_v<Key>);
  static_assert(std::is_trivially_copyable_v<Wiring>);
  return std::memcmp(keys_.data(), other.keys_.data(),
                     keys_.size() * sizeof(Key)) == 0 &&
         std::memcmp(wiring_.data(), other.wiring_.data(),
                     wiring_.size() * sizeof(Wiring)) == 0;
}

}  // namespace ferry
