// CompiledConstraint: a Constraint compiled against one model's vocabulary, ready for Matchers.
// It holds xgrammar's compiled grammar (the grammar plus the token masks precomputed for each of
// its states), so this header is for grammar/'s own .cc files; everyone else holds it only
// through std::shared_ptr<const CompiledConstraint>, declared in grammar_compiler.h.
//
// Thread-safety: immutable once built; any number of Matchers on any threads may share it.
#ifndef KVSERVE_GRAMMAR_COMPILED_CONSTRAINT_H_
#define KVSERVE_GRAMMAR_COMPILED_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "grammar/constraint.h"
#include "xgrammar/compiler.h"

namespace kvserve {

class CompiledConstraint {
 public:
  // `may_accept`: [vocab_size], false for ids no grammar ever accepts (tokens without bytes that
  // are not stop tokens, padding); shared by all constraints of one vocabulary.
  CompiledConstraint(Constraint::Kind kind, std::shared_ptr<const std::vector<bool>> may_accept,
                     xgrammar::CompiledGrammar compiled)
      : kind_(kind), may_accept_(std::move(may_accept)), compiled_(std::move(compiled)) {}

  Constraint::Kind kind() const { return kind_; }
  int32_t vocab_size() const { return static_cast<int32_t>(may_accept_->size()); }
  // REQUIRES: 0 <= id < vocab_size().
  bool MayAccept(int32_t id) const { return (*may_accept_)[id]; }
  const xgrammar::CompiledGrammar& compiled() const { return compiled_; }

 private:
  const Constraint::Kind kind_;
  const std::shared_ptr<const std::vector<bool>> may_accept_;
  const xgrammar::CompiledGrammar compiled_;
};

}  // namespace kvserve

#endif  // KVSERVE_GRAMMAR_COMPILED_CONSTRAINT_H_
