#include "ferry/tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

struct Symbol {
  int32_t id;  // -1: not in the vocabulary (score order only).
  uint32_t start;
  uint32_t len;  // 0 once merged into its left neighbor.
  int32_t prev;
  int32_t next;
};

struct Candidate {
  double priority;  // Lower merges first: rank, or -score.
  int32_t left;
  int32_t right;
  uint32_t len;  // left.len + right.len when queued (detects stale entries).
  int32_t id;
};

struct Later {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.left > b.left;  // Ties: leftmost first.
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    const TokenizerSpec& spec) {
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  model->order_ = spec.merge_order;
  model->unk_id_ = spec.unk_id;
  model->fuse_unk_ = spec.fuse_unk;
  model->byte_fallback_ = spec.byte_fallback;
  model->ignore_merges_ = spec.ignore_merges;
  const auto n = static_cast<int32_t>(spec.tokens.size());
  if (spec.tokens.empty()) {
    return absl::InvalidArgumentError("the vocabulary is empty");
  }
  if (spec.unk_id >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("unk id ", spec.unk_id, " is outside the vocabulary"));
  }
  model->token_to_id_.reserve(spec.tokens.size());
  for (int32_t id = 0; id < n; ++id) {
    // Duplicated texts: the last id wins, as in llama.cpp. Empty entries
    // (ids a tokenizer.json leaves unused) are never looked up.
    if (spec.tokens[id].empty()) continue;
    model->token_to_id_[spec.tokens[id]] = id;
  }
  model->byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const int32_t id = model->TokenToId(absl::StrFormat("<0x%02X>", b));
    model->byte_ids_[b] = id;
    if (id >= 0) model->byte_of_id_[id] = static_cast<uint8_t>(b);
  }
  if (spec.merge_order == TokenizerSpec::MergeOrder::kScore) {
    if (spec.scores.size() != spec.tokens.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the vocabulary has ", spec.tokens.size(),
                       " tokens but ", spec.scores.size(), " scores"));
    }
    model->scores_ = spec.scores;
    return model;
  }
  model->merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [a, b] = spec.merges[rank];
    const int32_t ia = model->TokenToId(a), ib = model->TokenToId(b);
    const int32_t merged = model->TokenToId(absl::StrCat(a, b));
    if (ia < 0 || ib < 0 || merged < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge #", rank, " ('", a, "' + '", b, "'): '",
                       ia < 0 ? a : (ib < 0 ? b : absl::StrCat(a, b)),
                       "' is not in the vocabulary"));
    }
    // A repeated pair keeps its first (lowest) rank.
    model->merges_.try_emplace(PairKey(ia, ib),
                               MergeRule{static_cast<int32_t>(rank), merged});
  }
  return model;
}

int32_t BpeModel::TokenToId(absl::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

int BpeModel::ByteOfToken(int32_t id) const {
  auto it = byte_of_id_.find(id);
  return it == byte_of_id_.end() ? -1 : it->second;
}

void BpeModel::EmitBytes(absl::string_view text,
                         std::vector<int32_t>& out) const {
  for (char c : text) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id >= 0) {
      out.push_back(id);
    } else if (unk_id_ >= 0) {
      out.push_back(unk_id_);
    }
  }
}

void BpeModel::EncodeWord(absl::string_view word,
                          std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const bool by_rank = order_ == TokenizerSpec::MergeOrder::kRank;
  if (by_rank && ignore_merges_) {
    if (const int32_t id = TokenToId(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // One symbol per character (by rank: characters missing from the
  // vocabulary become byte tokens, unk, or nothing, as HF's BPE does).
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto push = [&](int32_t id, size_t start, size_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, static_cast<uint32_t>(start),
                       static_cast<uint32_t>(len), index - 1, index + 1});
  };
  for (size_t pos = 0; pos < word.size();) {
    const int len = DecodeUtf8(word, pos).length;
    const int32_t id = TokenToId(word.substr(pos, len));
    if (id >= 0 || !by_rank) {
      push(id, pos, len);
    } else if (byte_fallback_ && [&] {
                 for (int k = 0; k < len; ++k) {
                   if (byte_ids_[static_cast<unsigned char>(word[pos + k])] <
                       0) {
                     return false;
                   }
                 }
                 return true;
               }()) {
      for (int k = 0; k < len; ++k) {
        push(byte_ids_[static_cast<unsigned char>(word[pos + k])], pos + k, 1);
      }
    } else if (unk_id_ >= 0) {
      if (fuse_unk_ && !symbols.empty() && symbols.back().id == unk_id_) {
        symbols.back().len += len;
      } else {
        push(unk_id_, pos, len);
      }
    }
    pos += len;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, Later> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    if (by_rank) {
      if (l.id < 0 || r.id < 0) return;
      auto it = merges_.find(PairKey(l.id, r.id));
      if (it == merges_.end()) return;
      queue.push({static_cast<double>(it->second.rank), left, right,
                  l.len + r.len, it->second.id});
    } else {
      const int32_t id = TokenToId(word.substr(l.start, l.len + r.len));
      if (id < 0) return;
      queue.push(
          {-static_cast<double>(scores_[id]), left, right, l.len + r.len, id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) {
    consider(i, i + 1);
  }
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[c.left];
    if (l.len == 0 || l.next != c.right) continue;
    Symbol& r = symbols[c.right];
    if (r.len == 0 || l.len + r.len != c.len) continue;  // Stale.
    l.id = c.id;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      EmitBytes(word.substr(s.start, s.len), out);
    }
  }
}

}  // namespace ferry::tokenizer
