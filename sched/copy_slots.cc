#include "ferry/sched/copy_slots.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

size_t AlignUp(size_t n, size_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// Alignment of host staging (AVX-512 loads; every pinned type allows it).
constexpr size_t kStagingAlignment = 64;

}  // namespace

CopySlots::CopySlots(int n_copies)
    : n_copies_(n_copies), slot_free_(static_cast<size_t>(n_copies)) {
  output_staging_.resize(static_cast<size_t>(n_copies));
}

size_t CopySlots::Chunked::bytes() const {
  size_t total = 0;
  for (const auto& chunk : chunks)
    total += chunk != nullptr ? chunk->size() : 0;
  return total;
}

size_t CopySlots::copy_bytes(const BufferType* type) const {
  for (const Chunked& c : copy_buffers_) {
    if (c.type == type) return c.bytes();
  }
  return 0;
}

std::vector<std::pair<size_t, size_t>> CopySlots::Layout(
    const BufferType& type, absl::Span<const size_t> sizes,
    std::vector<size_t>* chunk_sizes) {
  const size_t max = std::max<size_t>(type.max_size(), 1);
  std::vector<std::pair<size_t, size_t>> at;
  at.reserve(sizes.size());
  chunk_sizes->clear();
  for (size_t size : sizes) {
    // A new chunk when this one would grow past max_size; a copy larger
    // than max_size gets a chunk of its own (the type's Allocate then says
    // it is too large).
    if (chunk_sizes->empty() ||
        (chunk_sizes->back() > 0 && chunk_sizes->back() + size > max)) {
      chunk_sizes->push_back(0);
    }
    at.emplace_back(chunk_sizes->size() - 1, chunk_sizes->back());
    chunk_sizes->back() += size;
  }
  return at;
}

bool CopySlots::Fits(const Chunked& have, absl::Span<const size_t> need) {
  if (have.chunks.size() < need.size()) return false;
  for (size_t c = 0; c < need.size(); ++c) {
    if (have.chunks[c] == nullptr || have.chunks[c]->size() < need[c]) {
      return false;
    }
  }
  return true;
}

absl::Status CopySlots::Allocate(Chunked& into, BufferType* type,
                                 absl::Span<const size_t> chunk_sizes,
                                 absl::string_view what) {
  into.chunks.clear();
  into.type = type;
  for (size_t c = 0; c < chunk_sizes.size(); ++c) {
    absl::StatusOr<std::unique_ptr<Buffer>> buffer =
        type->Allocate(std::max<size_t>(chunk_sizes[c], 1));
    if (!buffer.ok()) {
      into.chunks.clear();
      return AnnotateStatus(
          buffer.status(),
          absl::StrCat(what, ": chunk ", c + 1, " of ", chunk_sizes.size(),
                       ", ", chunk_sizes[c], " bytes of ", type->name()));
    }
    (*buffer)->set_usage(BufferUsage::kCompute);
    into.chunks.push_back(*std::move(buffer));
  }
  return absl::OkStatus();
}

absl::Status CopySlots::Place(
    absl::Span<const Spec> specs,
    absl::FunctionRef<absl::Status()> before_replacing) {
  const size_t n = specs.size() * static_cast<size_t>(n_copies_);
  // Resized, not reassigned (Tensors have strings): placing resets each.
  copies_.resize(n);
  staging_.assign(n, nullptr);
  bool synchronized = false;
  auto replace = [&]() -> absl::Status {
    if (synchronized) return absl::OkStatus();
    synchronized = true;
    return before_replacing();
  };
  auto fail = [&](absl::Status status) {
    copies_.clear();
    staging_.clear();
    copy_buffers_.clear();
    staging_buffers_.clear();
    return status;
  };
  // Which specs use each type, in first-use order.
  auto group = [&](auto type_of) {
    std::vector<std::pair<BufferType*, std::vector<size_t>>> groups;
    for (size_t i = 0; i < specs.size(); ++i) {
      BufferType* type = type_of(specs[i]);
      if (type == nullptr) continue;
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == type; });
      if (it == groups.end()) {
        groups.push_back({type, {}});
        it = groups.end() - 1;
      }
      it->second.push_back(i);
    }
    return groups;
  };
  // Lays out one kind of buffer (copies or staging) for every type it uses;
  // `size_of` gives one slot's bytes of a spec, `place` places it.
  auto lay_out = [&](std::vector<Chunked>& buffers, auto type_of, auto size_of,
                     absl::string_view what, auto place) -> absl::Status {
    std::vector<Chunked> kept;
    for (const auto& [type, members] : group(type_of)) {
      std::vector<size_t> sizes;
      for (size_t i : members) {
        for (int c = 0; c < n_copies_; ++c) {
          sizes.push_back(size_of(specs[i], *type));
        }
      }
      std::vector<size_t> chunk_sizes;
      const std::vector<std::pair<size_t, size_t>> at =
          Layout(*type, sizes, &chunk_sizes);
      Chunked buffer;
      auto old = std::find_if(buffers.begin(), buffers.end(),
                              [&](const Chunked& b) { return b.type == type; });
      if (old != buffers.end() && Fits(*old, chunk_sizes)) {
        buffer = std::move(*old);
      } else {
        if (old != buffers.end()) FERRY_RETURN_IF_ERROR(replace());
        if (old != buffers.end()) old->chunks.clear();
        size_t total = 0;
        for (size_t s : chunk_sizes) total += s;
        FERRY_RETURN_IF_ERROR(Allocate(buffer, type, chunk_sizes, what),
                              "scheduler: cannot allocate the ", what,
                              " buffer for '", specs[members.front()].backend,
                              "' (", n_copies_, " slots x ", members.size(),
                              " inputs, ", total, " bytes)");
      }
      size_t k = 0;
      for (size_t i : members) {
        for (int c = 0; c < n_copies_; ++c, ++k) {
          Buffer& chunk = *buffer.chunks[at[k].first];
          FERRY_RETURN_IF_ERROR(place(i, c, chunk, at[k].second));
        }
      }
      kept.push_back(std::move(buffer));
    }
    if (kept.size() < buffers.size()) FERRY_RETURN_IF_ERROR(replace());
    buffers = std::move(kept);
    return absl::OkStatus();
  };

  absl::Status status = lay_out(
      copy_buffers_, [](const Spec& s) { return s.type; },
      [](const Spec& s, const BufferType& type) {
        return AlignUp(type.AllocSize(*s.source), type.alignment());
      },
      "copies",
      [&](size_t i, int c, Buffer& chunk, size_t offset) {
        Tensor& copy = copies_[i * n_copies_ + c];
        const Tensor& source = *specs[i].source;
        copy.buffer = nullptr;
        copy.data = nullptr;
        copy.dtype = source.dtype;
        copy.ne = source.ne;
        copy.nb = source.nb;
        copy.flags = kTensorFlagInput;
        copy.name = source.name;
        return PlaceTensor(chunk, copy, offset);
      });
  if (!status.ok()) return fail(std::move(status));
  status = lay_out(
      staging_buffers_, [](const Spec& s) { return s.staging_type; },
      [](const Spec& s, const BufferType&) {
        return AlignUp(static_cast<size_t>(s.source->NumBytes()),
                       kStagingAlignment);
      },
      "staging",
      [&](size_t i, int c, Buffer& chunk, size_t offset) {
        staging_[i * n_copies_ + c] = static_cast<char*>(chunk.base()) + offset;
        return absl::OkStatus();
      });
  if (!status.ok()) return fail(std::move(status));
  return absl::OkStatus();
}

absl::StatusOr<char*> CopySlots::OutputStaging(int slot, size_t bytes,
                                               BufferType* type) {
  std::unique_ptr<Buffer>& buffer = output_staging_[static_cast<size_t>(slot)];
  if (buffer == nullptr || buffer->size() < bytes || buffer->type() != type) {
    buffer.reset();
    FERRY_ASSIGN_OR_RETURN(
        buffer, type->Allocate(std::max<size_t>(bytes, 1)),
        "scheduler: cannot allocate the output staging of slot ", slot, " (",
        bytes, " bytes of ", type->name(), ")");
  }
  return static_cast<char*>(buffer->base());
}

int64_t CopySlots::TakeTicket() {
  std::lock_guard<std::mutex> lock(ticket_mu_);
  return next_ticket_++;
}

void CopySlots::ResetSlots() {
  for (Event& event : slot_free_) event = Event();
}

}  // namespace ferry
