// GrammarCompiler: Constraint -> xgrammar grammar -> compiled grammar, on a thread per compile,
// behind a cache.
#include "grammar/grammar_compiler.h"

#include <atomic>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "grammar/compiled_constraint.h"
#include "grammar/xgrammar_errors.h"
#include "tokenizer/unicode.h"
#include "xgrammar/compiler.h"
#include "xgrammar/grammar.h"
#include "xgrammar/tokenizer_info.h"

namespace kvserve {

struct GrammarCompiler::CacheEntry {
  absl::Notification done;
  // Written once by the compile thread, before done.Notify(); read only after done.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> result;
};

struct GrammarCompiler::SharedState {
  std::unique_ptr<xgrammar::GrammarCompiler> compiler;
  std::shared_ptr<const std::vector<bool>> may_accept;  // see CompiledConstraint
  bool json_any_whitespace = true;
  int json_max_whitespace = 0;
  std::atomic<int> running{0};  // compile threads alive
};

namespace {

// The text of `bytes` as an EBNF string literal: quotes, backslashes and control characters
// escaped (\u00XX has a fixed width, unlike \x, so a hex digit after it stays a character).
std::string EbnfLiteral(const std::string& bytes) {
  std::string literal = "\"";
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      literal.push_back('\\');
      literal.push_back(c);
    } else if (byte < 0x20 || byte == 0x7F) {
      absl::StrAppendFormat(&literal, "\\u%04X", byte);
    } else {
      literal.push_back(c);
    }
  }
  literal.push_back('"');
  return literal;
}

absl::StatusOr<std::string> ChoiceEbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) return absl::InvalidArgumentError("choice: the list of choices is empty");
  std::string ebnf = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) ebnf += " | ";
    ebnf += EbnfLiteral(choices[i]);
  }
  return ebnf;
}

// The grammar a constraint stands for (parsing and checking its text), or INVALID_ARGUMENT.
absl::StatusOr<xgrammar::Grammar> ToGrammar(const Constraint& constraint, bool any_whitespace,
                                            int max_whitespace) {
  const std::optional<int> whitespace_cap =
      max_whitespace > 0 ? std::optional<int>(max_whitespace) : std::nullopt;
  const std::string context = absl::StrCat("invalid ", ConstraintKindName(constraint.kind));
  // A JSON text, regex or grammar is Unicode text; bytes that are not UTF-8 would reach the
  // output as they are (a const string of them is not JSON).
  if (!IsValidUtf8(constraint.spec)) return absl::InvalidArgumentError(context + ": not UTF-8");
  for (const std::string& choice : constraint.choices) {
    if (!IsValidUtf8(choice))
      return absl::InvalidArgumentError(context + ": a choice is not UTF-8");
  }
  std::optional<xgrammar::Grammar> grammar;
  absl::Status status;
  switch (constraint.kind) {
    case Constraint::kNone:
      return absl::InvalidArgumentError("constraint of kind none has nothing to compile");
    case Constraint::kJsonObject:
      // Any object: strict mode off, or an object schema without properties would allow only {}.
      status = CatchXgrammar(absl::StatusCode::kInvalidArgument, context, [&] {
        grammar = xgrammar::Grammar::FromJSONSchema(R"({"type": "object"})", any_whitespace,
                                                    std::nullopt, std::nullopt,
                                                    /*strict_mode=*/false, whitespace_cap);
      });
      break;
    case Constraint::kJsonSchema:
      if (constraint.spec.empty()) return absl::InvalidArgumentError(context + ": empty schema");
      // Strict mode: properties and items the schema does not name are not generated unless
      // the schema allows them (additionalProperties / items), as OpenAI's strict schemas.
      status = CatchXgrammar(absl::StatusCode::kInvalidArgument, context, [&] {
        grammar =
            xgrammar::Grammar::FromJSONSchema(constraint.spec, any_whitespace, std::nullopt,
                                              std::nullopt, /*strict_mode=*/true, whitespace_cap);
      });
      break;
    case Constraint::kRegex:
      if (constraint.spec.empty()) return absl::InvalidArgumentError(context + ": empty regex");
      status = CatchXgrammar(absl::StatusCode::kInvalidArgument, context,
                             [&] { grammar = xgrammar::Grammar::FromRegex(constraint.spec); });
      break;
    case Constraint::kChoice: {
      absl::StatusOr<std::string> ebnf = ChoiceEbnf(constraint.choices);
      if (!ebnf.ok()) return ebnf.status();
      status = CatchXgrammar(absl::StatusCode::kInvalidArgument, context,
                             [&] { grammar = xgrammar::Grammar::FromEBNF(*ebnf); });
      break;
    }
    case Constraint::kGrammar:
      if (constraint.spec.empty()) return absl::InvalidArgumentError(context + ": empty grammar");
      status = CatchXgrammar(absl::StatusCode::kInvalidArgument, context, [&] {
        grammar = xgrammar::Grammar::FromEBNF(constraint.spec, "root");
      });
      break;
  }
  if (!status.ok()) return status;
  if (!grammar.has_value()) return absl::InvalidArgumentError(context + ": unknown kind");
  return std::move(*grammar);
}

std::shared_ptr<const std::vector<bool>> MayAcceptTable(const GrammarVocabulary& vocabulary) {
  auto may_accept = std::make_shared<std::vector<bool>>(vocabulary.vocab_size, false);
  for (size_t id = 0; id < vocabulary.token_bytes.size(); ++id) {
    (*may_accept)[id] = !vocabulary.token_bytes[id].empty();
  }
  for (int32_t id : vocabulary.stop_token_ids) (*may_accept)[id] = true;
  return may_accept;
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> CompileNow(
    const Constraint& constraint, const xgrammar::GrammarCompiler& const_compiler,
    std::shared_ptr<const std::vector<bool>> may_accept, bool any_whitespace, int max_whitespace) {
  absl::StatusOr<xgrammar::Grammar> grammar = ToGrammar(constraint, any_whitespace, max_whitespace);
  if (!grammar.ok()) return grammar.status();
  // CompileGrammar is not const in xgrammar's interface but keeps no state between calls when
  // its cache is off (as here), so concurrent calls are safe.
  auto& compiler = const_cast<xgrammar::GrammarCompiler&>(const_compiler);
  std::optional<xgrammar::CompiledGrammar> compiled;
  const absl::Status status =
      CatchXgrammar(absl::StatusCode::kInvalidArgument,
                    absl::StrCat("cannot compile ", ConstraintKindName(constraint.kind)),
                    [&] { compiled = compiler.CompileGrammar(*grammar); });
  if (!status.ok()) return status;
  return std::make_shared<const CompiledConstraint>(constraint.kind, std::move(may_accept),
                                                    std::move(*compiled));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrammarCompiler>> GrammarCompiler::Create(
    const GrammarVocabulary& vocabulary, const GrammarCompilerOptions& options) {
  if (absl::Status valid = ValidateVocabulary(vocabulary); !valid.ok()) return valid;
  if (options.threads_per_compile < 1 || options.max_background_compiles < 1 ||
      options.max_cached < 1 || options.json_max_whitespace < 0) {
    return absl::InvalidArgumentError(
        "grammar compiler: threads_per_compile, max_background_compiles and max_cached must be "
        "at least 1, json_max_whitespace at least 0");
  }
  auto shared = std::make_shared<SharedState>();
  shared->may_accept = MayAcceptTable(vocabulary);
  shared->json_any_whitespace = options.json_any_whitespace;
  shared->json_max_whitespace = options.json_max_whitespace;
  const absl::Status status =
      CatchXgrammar(absl::StatusCode::kInvalidArgument, "grammar compiler", [&] {
        // RAW: the token strings are already the bytes each token adds to the text.
        xgrammar::TokenizerInfo info(vocabulary.token_bytes, xgrammar::VocabType::RAW,
                                     vocabulary.vocab_size, vocabulary.stop_token_ids,
                                     /*add_prefix_space=*/false);
        shared->compiler = std::make_unique<xgrammar::GrammarCompiler>(
            info, options.threads_per_compile, /*cache_enabled=*/false);
      });
  if (!status.ok()) return status;
  return std::unique_ptr<GrammarCompiler>(
      new GrammarCompiler(vocabulary.vocab_size, options, std::move(shared)));
}

GrammarCompiler::GrammarCompiler(int32_t vocab_size, const GrammarCompilerOptions& options,
                                 std::shared_ptr<SharedState> shared)
    : vocab_size_(vocab_size), options_(options), shared_(std::move(shared)) {}

// Compile threads hold shared_ and their entry, so they may outlive the compiler.
GrammarCompiler::~GrammarCompiler() = default;

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarCompiler::Compile(
    const Constraint& constraint, absl::Duration timeout) {
  if (!constraint.constrains()) {
    return absl::InvalidArgumentError("constraint of kind none has nothing to compile");
  }
  absl::Status start_status;
  std::shared_ptr<CacheEntry> entry =
      FindOrStart(ConstraintKey(constraint), constraint, &start_status);
  if (entry == nullptr) return start_status;
  if (!entry->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "compiling the ", ConstraintKindName(constraint.kind), " constraint took more than ",
        absl::FormatDuration(timeout), "; it goes on in the background and a retry may find it"));
  }
  return entry->result;
}

std::shared_ptr<GrammarCompiler::CacheEntry> GrammarCompiler::FindOrStart(
    const std::string& key, const Constraint& constraint, absl::Status* status) {
  absl::MutexLock lock(&mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    TouchLocked(key);
    return it->second.entry;
  }
  if (shared_->running.load() >= options_.max_background_compiles) {
    *status = absl::ResourceExhaustedError(
        absl::StrCat("grammar compiler: ", options_.max_background_compiles,
                     " compiles are running already; retry later"));
    return nullptr;
  }
  auto entry = std::make_shared<CacheEntry>();
  recency_.push_front(key);
  entries_[key] = Slot{entry, recency_.begin()};
  while (entries_.size() > options_.max_cached) {
    entries_.erase(recency_.back());
    recency_.pop_back();
  }
  shared_->running.fetch_add(1);
  // Detached: the caller may stop waiting (timeout) and xgrammar cannot be interrupted, so the
  // thread owns what it needs and ends on its own.
  try {
    std::thread([shared = shared_, entry, constraint] {
      entry->result = CompileNow(constraint, *shared->compiler, shared->may_accept,
                                 shared->json_any_whitespace, shared->json_max_whitespace);
      entry->done.Notify();
      shared->running.fetch_sub(1);
    }).detach();
  } catch (const std::system_error& error) {
    shared_->running.fetch_sub(1);
    entries_.erase(key);
    recency_.pop_front();
    *status = absl::ResourceExhaustedError(
        absl::StrCat("grammar compiler: cannot start a compile thread: ", error.what()));
    return nullptr;
  }
  return entry;
}

void GrammarCompiler::TouchLocked(const std::string& key) {
  Slot& slot = entries_.at(key);
  recency_.splice(recency_.begin(), recency_, slot.recency);
}

void GrammarCompiler::ClearCache() {
  absl::MutexLock lock(&mu_);
  entries_.clear();
  recency_.clear();
}

size_t GrammarCompiler::cache_size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace kvserve
