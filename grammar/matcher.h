// Matcher: one request's place in its constraint. Each decode step the engine asks it for the
// tokens that may come next (a bitmask over the vocabulary), masks the logits with it before
// sampling, and tells it the token that was sampled:
//
//   matcher.FillNextTokenBitmask(mask);   // [MaskWords(vocab_size)] words
//   ApplyTokenMask(mask, logits, vocab);  // disallowed logits -> -inf
//   id = Sample(logits);
//   matcher.AcceptToken(id);              // true: id was allowed
//
// A stop token (the vocabulary's EOS ids) is allowed exactly where the constraint may end; once
// one is accepted the matcher is terminated. Rollback(n) undoes the last n accepted tokens, for a
// preempted or speculated request. Bit i of the mask (word i / 32, bit i % 32, least significant
// first) is 1 when token i may come next; ids past the tokenizer's vocabulary (padding of the
// logits) are never allowed.
//
// Thread-safety: one request's matcher is used by one thread at a time; matchers of different
// requests run concurrently (they share the CompiledConstraint read-only).
#ifndef KVSERVE_GRAMMAR_MATCHER_H_
#define KVSERVE_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve {

class CompiledConstraint;  // grammar/compiled_constraint.h

class Matcher {
 public:
  // 32-bit words of a mask over `vocab_size` tokens.
  static constexpr int32_t MaskWords(int32_t vocab_size) { return (vocab_size + 31) / 32; }

  // A matcher at the start of `compiled`; INVALID_ARGUMENT when compiled is null.
  static absl::StatusOr<std::unique_ptr<Matcher>> Create(
      std::shared_ptr<const CompiledConstraint> compiled);
  ~Matcher();

  // Writes the tokens allowed next into mask[0, MaskWords(vocab_size())). A terminated matcher
  // allows nothing. INTERNAL only on a fault of the grammar engine.
  absl::Status FillNextTokenBitmask(uint32_t* mask) const;

  // Advances past `token_id`; false (and no change) when the token is not allowed here, is out
  // of range, or the matcher is terminated.
  bool AcceptToken(int32_t token_id);

  // Undoes the last `num_tokens` accepted tokens (a stop token included, which ends the
  // termination). INVALID_ARGUMENT when num_tokens is negative or more than were accepted.
  absl::Status Rollback(int32_t num_tokens);

  // A stop token was accepted: the output is complete.
  bool IsTerminated() const;
  // The text so far is a complete match: a stop token would be allowed now.
  bool CanStop() const;
  // Tokens accepted and not rolled back, the stop token included.
  int32_t num_accepted_tokens() const { return num_accepted_; }
  int32_t vocab_size() const;

 private:
  struct Impl;  // xgrammar's matcher
  explicit Matcher(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  int32_t num_accepted_ = 0;
};

// Sets logits[i] to -infinity for every token i whose bit in `mask` is 0.
// mask: [Matcher::MaskWords(vocab_size)] words; logits: [vocab_size] floats, both on the host.
// This is the CPU path; a CUDA runner must do the same on the device (one thread per logit, the
// mask copied up with the step's inputs) so the sampler never sees a disallowed token.
void ApplyTokenMask(const uint32_t* mask, float* logits, int32_t vocab_size);

}  // namespace kvserve

#endif  // KVSERVE_GRAMMAR_MATCHER_H_
