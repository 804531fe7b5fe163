// Constraint: what a request asks its output to be, before anything is compiled. The HTTP and
// gRPC front ends translate the OpenAI fields (`response_format`: json_object, json_schema) and
// vLLM's (`structured_outputs` / `guided_*`: json, regex, choice, grammar) into one of these; the
// GrammarCompiler (grammar/grammar_compiler.h) turns it into a CompiledConstraint.
//
//   kind          spec                                      choices
//   kNone         unused: the output is free                unused
//   kJsonObject   unused: any JSON object                   unused
//   kJsonSchema   the JSON Schema document, as JSON text    unused
//   kRegex        the regular expression (whole output)     unused
//   kChoice       unused                                    the allowed outputs, exactly
//   kGrammar      EBNF with a `root` rule (GBNF's syntax)   unused
//
// A plain value type; copy freely.
#ifndef KVSERVE_GRAMMAR_CONSTRAINT_H_
#define KVSERVE_GRAMMAR_CONSTRAINT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvserve {

struct Constraint {
  enum Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };

  Kind kind = kNone;
  std::string spec;
  std::vector<std::string> choices;

  bool constrains() const { return kind != kNone; }
};

// "none", "json_object", "json_schema", "regex", "choice", "grammar": for messages and metrics.
absl::string_view ConstraintKindName(Constraint::Kind kind);

// A string that differs exactly when two constraints compile differently (the cache key).
std::string ConstraintKey(const Constraint& constraint);

}  // namespace kvserve

#endif  // KVSERVE_GRAMMAR_CONSTRAINT_H_
