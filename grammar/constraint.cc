// Constraint's names and cache key.
#include "grammar/constraint.h"

#include "absl/strings/str_cat.h"

namespace kvserve {

absl::string_view ConstraintKindName(Constraint::Kind kind) {
  switch (kind) {
    case Constraint::kNone:
      return "none";
    case Constraint::kJsonObject:
      return "json_object";
    case Constraint::kJsonSchema:
      return "json_schema";
    case Constraint::kRegex:
      return "regex";
    case Constraint::kChoice:
      return "choice";
    case Constraint::kGrammar:
      return "grammar";
  }
  return "unknown";
}

std::string ConstraintKey(const Constraint& constraint) {
  // Every variable-length part is preceded by its length, so no two constraints share a key.
  std::string key = absl::StrCat(static_cast<int>(constraint.kind), ":");
  if (constraint.kind == Constraint::kChoice) {
    for (const std::string& choice : constraint.choices) {
      absl::StrAppend(&key, choice.size(), ":", choice);
    }
  } else if (constraint.kind != Constraint::kNone && constraint.kind != Constraint::kJsonObject) {
    absl::StrAppend(&key, constraint.spec.size(), ":", constraint.spec);
  }
  return key;
}

}  // namespace kvserve
