// Matcher over xgrammar's GrammarMatcher; ApplyTokenMask.
#include "grammar/matcher.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dlpack/dlpack.h"
#include "grammar/compiled_constraint.h"
#include "grammar/xgrammar_errors.h"
#include "xgrammar/matcher.h"

namespace kvserve {

struct Matcher::Impl {
  std::shared_ptr<const CompiledConstraint> compiled;  // keeps the grammar alive
  // Mutable: xgrammar's mask fill is not const (it records the step it computed for) but does
  // not change what the matcher accepts.
  mutable xgrammar::GrammarMatcher matcher;
};

absl::StatusOr<std::unique_ptr<Matcher>> Matcher::Create(
    std::shared_ptr<const CompiledConstraint> compiled) {
  if (compiled == nullptr) return absl::InvalidArgumentError("matcher: no compiled constraint");
  std::unique_ptr<Impl> impl;
  const absl::Status status = CatchXgrammar(absl::StatusCode::kInternal, "matcher", [&] {
    xgrammar::GrammarMatcher matcher(compiled->compiled());
    impl.reset(new Impl{std::move(compiled), std::move(matcher)});
  });
  if (!status.ok()) return status;
  return std::unique_ptr<Matcher>(new Matcher(std::move(impl)));
}

Matcher::Matcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Matcher::~Matcher() = default;

int32_t Matcher::vocab_size() const { return impl_->compiled->vocab_size(); }

absl::Status Matcher::FillNextTokenBitmask(uint32_t* mask) const {
  const int32_t words = MaskWords(vocab_size());
  if (IsTerminated()) {
    std::fill_n(mask, words, 0u);
    return absl::OkStatus();
  }
  int64_t shape[1] = {words};
  DLTensor tensor{};
  tensor.data = mask;
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLInt, 32, 1};
  tensor.shape = shape;
  const absl::Status status = CatchXgrammar(absl::StatusCode::kInternal, "matcher mask",
                                            [&] { impl_->matcher.FillNextTokenBitmask(&tensor); });
  if (!status.ok()) return status;
  // The bits past vocab_size in the last word are not ours to leave set.
  if (const int32_t tail = vocab_size() % 32; tail != 0) mask[words - 1] &= (1u << tail) - 1;
  return absl::OkStatus();
}

bool Matcher::AcceptToken(int32_t token_id) {
  // Tokens no grammar accepts are refused here: xgrammar would refuse them too, but with a
  // warning on stderr for each.
  if (token_id < 0 || token_id >= vocab_size() || !impl_->compiled->MayAccept(token_id) ||
      IsTerminated()) {
    return false;
  }
  bool accepted = false;
  const absl::Status status = CatchXgrammar(absl::StatusCode::kInternal, "matcher accept", [&] {
    accepted = impl_->matcher.AcceptToken(token_id);
  });
  if (!status.ok() || !accepted) return false;
  ++num_accepted_;
  return true;
}

absl::Status Matcher::Rollback(int32_t num_tokens) {
  if (num_tokens < 0 || num_tokens > num_accepted_) {
    return absl::InvalidArgumentError(absl::StrCat("matcher: cannot roll back ", num_tokens,
                                                   " tokens; ", num_accepted_, " accepted"));
  }
  if (num_tokens == 0) return absl::OkStatus();
  absl::Status status = CatchXgrammar(absl::StatusCode::kInternal, "matcher rollback",
                                      [&] { impl_->matcher.Rollback(num_tokens); });
  if (status.ok()) num_accepted_ -= num_tokens;
  return status;
}

bool Matcher::IsTerminated() const { return impl_->matcher.IsTerminated(); }

bool Matcher::CanStop() const { return !IsTerminated() && impl_->matcher.IsCompleted(); }

void ApplyTokenMask(const uint32_t* mask, float* logits, int32_t vocab_size) {
  constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
  // Copied whole (libc's memcpy is vectorised where a fill loop at -O2 is not).
  static constexpr std::array<float, 32> kAllMinusInfinity = [] {
    std::array<float, 32> block{};
    block.fill(-std::numeric_limits<float>::infinity());
    return block;
  }();
  for (int32_t word = 0; word * 32 < vocab_size; ++word) {
    const uint32_t bits = mask[word];
    if (bits == ~0u) continue;  // all 32 allowed: common in free text
    float* const block = logits + word * 32;
    const int32_t count = std::min(32, vocab_size - word * 32);
    if (bits == 0) {  // none allowed: common inside a structure
      std::memcpy(block, kAllMinusInfinity.data(), count * sizeof(float));
      continue;
    }
    // A select, not a branch: mixed words have no pattern a branch predictor could learn.
    for (int32_t bit = 0; bit < count; ++bit) {
      block[bit] = ((bits >> bit) & 1u) != 0 ? block[bit] : kMinusInfinity;
    }
  }
}

}  // namespace kvserve
