// libFuzzer target: arbitrary bytes become a constraint (JSON schema, json_object, regex, choice,
// EBNF grammar), compiled by GrammarCompiler over a small synthetic vocabulary, then a walk of a
// Matcher over it: tokens taken from the mask or anywhere in the vocabulary, stop tokens,
// rollbacks. A violated invariant prints what broke and aborts:
//
//   - Compile returns within its deadline, and a failure is INVALID_ARGUMENT with a message that
//     is not one of xgrammar's internal checks (a compile past the deadline on a vocabulary this
//     small counts as a finding too: the input is kept);
//   - each step, a token is accepted iff its bit is set in the mask; a refused token changes
//     nothing; ids no grammar accepts (no bytes, padding) are never set;
//   - a stop token's bit is set iff CanStop(); once one is accepted the matcher is terminated
//     and its mask is empty;
//   - Rollback(n) brings back the mask seen n tokens earlier, and refuses n past what was
//     accepted; accepting the same token again gives the same mask as before;
//   - a terminated JSON walk (json_object, json_schema) is one JSON text (an object for
//     json_object); a terminated choice walk is one of the choices.
//
// Input format: byte 0 picks the form (byte 0 % 5: json_schema, json_object, regex, choice,
// grammar) and the JSON whitespace options (byte 0 / 5 % 3); the constraint's text runs from
// byte 1 to the first NUL byte (choices separated by 0x1F; json_object ignores it); every pair of
// bytes after the NUL is one step of the walk (kind byte, argument byte; see Step).
//   python3 tests/grammar/grammar_make_fuzz_seeds.py seeds/
//   build-fuzz/tests/grammar/grammar_fuzz -max_total_time=300 -timeout=25 corpus/ seeds/
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grammar/constraint.h"
#include "grammar/grammar_compiler.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "tests/grammar/json_text.h"
#include "tests/grammar/synthetic_vocabulary.h"

namespace kvserve {
namespace {

// Far more than any compile over this vocabulary needs (milliseconds, under ASan too); a compile
// that takes longer is a finding. Below fuzz.sh's -timeout=25.
constexpr absl::Duration kCompileDeadline = absl::Seconds(10);
// Slack for Compile itself to return once the deadline has passed.
constexpr absl::Duration kReturnSlack = absl::Seconds(5);
constexpr size_t kMaxSpecBytes = 4096;
constexpr int kMaxSteps = 2000;
constexpr char kChoiceSeparator = '\x1f';

// The tests' synthetic vocabulary (printable ASCII, newline, tab, a few words, a control token,
// EOS, padding) and after it every other single byte, so that any byte string can be spelled
// (raw bytes past 0x7F are how multi-byte and malformed UTF-8 reach the grammar), and a few
// multi-byte characters and JSON pieces as whole tokens.
GrammarVocabulary FuzzVocabulary() {
  GrammarVocabulary vocabulary = grammar_test::SyntheticVocabulary().vocabulary;
  std::vector<std::string>& tokens = vocabulary.token_bytes;
  for (int byte = 0; byte < 0x100; ++byte) {
    if ((byte >= 0x20 && byte < 0x7F) || byte == '\n' || byte == '\t') continue;
    tokens.push_back(std::string(1, static_cast<char>(byte)));
  }
  for (const char* token : {"\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xED\xA0\x80", "\\n",
                            "\\u00", "\\\"", "\": \"", "}\n", "[]", "{}", "0.5e-3"}) {
    tokens.push_back(token);
  }
  vocabulary.vocab_size = static_cast<int32_t>(tokens.size()) + 5;
  return vocabulary;
}

struct Fixture {
  GrammarVocabulary vocabulary;
  // One per JSON whitespace option set; each caches its compiles across inputs.
  std::unique_ptr<GrammarCompiler> compilers[3];
};

const Fixture& GetFixture() {
  static const Fixture* const fixture = [] {
    auto* f = new Fixture;
    f->vocabulary = FuzzVocabulary();
    for (int i = 0; i < 3; ++i) {
      GrammarCompilerOptions options;
      options.json_any_whitespace = i != 1;
      options.json_max_whitespace = i == 2 ? 2 : 0;
      absl::StatusOr<std::unique_ptr<GrammarCompiler>> compiler =
          GrammarCompiler::Create(f->vocabulary, options);
      if (!compiler.ok()) {
        std::fprintf(stderr, "grammar_fuzz: %s\n", compiler.status().ToString().c_str());
        std::abort();
      }
      f->compilers[i] = std::move(*compiler);
    }
    return f;
  }();
  return *fixture;
}

// Prints the broken invariant with the constraint and the walk's text so far, and aborts.
[[noreturn]] void ReportViolation(const Constraint& constraint, const std::string& text,
                                  const std::string& what) {
  std::string spec = constraint.spec;
  for (const std::string& choice : constraint.choices) absl::StrAppend(&spec, "\n  | ", choice);
  std::fprintf(stderr, "grammar_fuzz: %s\n  constraint (%s): %s\n  text so far: \"%s\"\n",
               what.c_str(), std::string(ConstraintKindName(constraint.kind)).c_str(), spec.c_str(),
               text.c_str());
  std::abort();
}

bool Bit(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[id / 32] >> (id % 32)) & 1u;
}

// One walk of a Matcher with the checks above. history_[n] is the mask after n accepted tokens.
class Walk {
 public:
  Walk(const Constraint& constraint, const GrammarVocabulary& vocabulary,
       std::unique_ptr<Matcher> matcher)
      : constraint_(constraint), vocabulary_(vocabulary), matcher_(std::move(matcher)) {
    history_.push_back(CheckedMask());
  }

  // kind % 8: 0-3 the (argument % n)-th of the n allowed tokens; 4 any id
  // ((kind / 8) * 256 + argument, modulo the vocabulary size); 5 the stop token; 6 Rollback(n)
  // with n = argument % (accepted + 2), one past what may be rolled back; 7 as 0-3, then a
  // rollback of that token and the same token again.
  void Step(uint8_t kind, uint8_t argument) {
    switch (kind % 8) {
      case 4:
        Accept(((kind / 8) * 256 + argument) % matcher_->vocab_size(), false);
        return;
      case 5:
        Accept(vocabulary_.stop_token_ids[0], false);
        return;
      case 6:
        Rollback(argument % (static_cast<int32_t>(ids_.size()) + 2));
        return;
      default: {
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < matcher_->vocab_size(); ++id) {
          if (Bit(history_.back(), id)) allowed.push_back(id);
        }
        if (allowed.empty()) return;
        Accept(allowed[argument % allowed.size()], kind % 8 == 7);
        return;
      }
    }
  }

 private:
  bool IsStop(int32_t id) const {
    return std::find(vocabulary_.stop_token_ids.begin(), vocabulary_.stop_token_ids.end(), id) !=
           vocabulary_.stop_token_ids.end();
  }

  std::string Text() const {
    std::string text;
    for (int32_t id : ids_) {
      if (id < static_cast<int32_t>(vocabulary_.token_bytes.size())) {
        text += vocabulary_.token_bytes[id];
      }
    }
    return text;
  }

  [[noreturn]] void Fail(const std::string& what) const {
    ReportViolation(constraint_, Text(), what);
  }

  // The mask now, after checking it against the vocabulary, CanStop and IsTerminated.
  std::vector<uint32_t> CheckedMask() const {
    std::vector<uint32_t> mask(Matcher::MaskWords(matcher_->vocab_size()));
    if (absl::Status status = matcher_->FillNextTokenBitmask(mask.data()); !status.ok()) {
      Fail(absl::StrCat("FillNextTokenBitmask failed: ", status.ToString()));
    }
    const int32_t num_tokens = static_cast<int32_t>(vocabulary_.token_bytes.size());
    for (int32_t id = 0; id < static_cast<int32_t>(mask.size()) * 32; ++id) {
      if (!Bit(mask, id)) continue;
      if (id >= num_tokens || (vocabulary_.token_bytes[id].empty() && !IsStop(id))) {
        Fail(absl::StrCat("mask allows token ", id, ", which has no bytes or is padding"));
      }
    }
    const bool terminated = matcher_->IsTerminated();
    if (terminated && std::any_of(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; })) {
      Fail("a terminated matcher's mask allows tokens");
    }
    for (int32_t stop : vocabulary_.stop_token_ids) {
      if (Bit(mask, stop) != matcher_->CanStop()) {
        Fail(absl::StrCat("stop token bit ", Bit(mask, stop), " but CanStop() is ",
                          matcher_->CanStop(), terminated ? " (terminated)" : ""));
      }
    }
    if (matcher_->num_accepted_tokens() != static_cast<int32_t>(ids_.size())) {
      Fail(absl::StrCat("num_accepted_tokens() is ", matcher_->num_accepted_tokens(), ", expected ",
                        ids_.size()));
    }
    return mask;
  }

  void ExpectMask(const std::vector<uint32_t>& expected, const std::string& when) const {
    if (CheckedMask() != expected) Fail("the mask differs " + when);
  }

  void Accept(int32_t id, bool round_trip) {
    const bool allowed = Bit(history_.back(), id);
    const bool accepted = matcher_->AcceptToken(id);
    if (accepted != allowed) {
      Fail(absl::StrCat("token ", id, " was ", accepted ? "accepted" : "refused",
                        " but its mask bit is ", allowed));
    }
    if (!accepted) {
      ExpectMask(history_.back(), absl::StrCat("after token ", id, " was refused"));
      return;
    }
    ids_.push_back(id);
    if (IsStop(id) && !matcher_->IsTerminated()) Fail("a stop token did not terminate");
    history_.push_back(CheckedMask());
    if (IsStop(id)) CheckFinishedText();
    if (!round_trip) return;
    const std::vector<uint32_t> after = history_.back();
    Rollback(1);
    if (!matcher_->AcceptToken(id)) Fail(absl::StrCat("token ", id, " refused after its rollback"));
    ids_.push_back(id);
    history_.push_back(after);
    ExpectMask(after, absl::StrCat("after token ", id, " was rolled back and accepted again"));
  }

  void Rollback(int32_t num_tokens) {
    const int32_t accepted = static_cast<int32_t>(ids_.size());
    const absl::Status status = matcher_->Rollback(num_tokens);
    if (num_tokens > accepted) {
      if (status.code() != absl::StatusCode::kInvalidArgument) {
        Fail(absl::StrCat("Rollback(", num_tokens, ") of ", accepted,
                          " tokens: ", status.ToString()));
      }
      ExpectMask(history_.back(), "after a refused rollback");
      return;
    }
    if (!status.ok()) Fail(absl::StrCat("Rollback(", num_tokens, "): ", status.ToString()));
    ids_.resize(accepted - num_tokens);
    history_.resize(ids_.size() + 1);
    ExpectMask(history_.back(), absl::StrCat("from the one ", num_tokens,
                                             " tokens earlier after Rollback(", num_tokens, ")"));
  }

  void CheckFinishedText() const {
    const std::string text = Text();
    switch (constraint_.kind) {
      case Constraint::kJsonObject:
      case Constraint::kJsonSchema: {
        const nlohmann::json value = grammar_test::ParseJsonText(text);
        if (value.is_discarded()) Fail("the finished text is not JSON");
        if (constraint_.kind == Constraint::kJsonObject && !value.is_object()) {
          Fail("the finished text is not a JSON object");
        }
        return;
      }
      case Constraint::kChoice:
        if (std::find(constraint_.choices.begin(), constraint_.choices.end(), text) ==
            constraint_.choices.end()) {
          Fail("the finished text is none of the choices");
        }
        return;
      default:
        return;
    }
  }

  const Constraint& constraint_;
  const GrammarVocabulary& vocabulary_;
  std::unique_ptr<Matcher> matcher_;
  std::vector<int32_t> ids_;  // accepted, stop tokens included
  std::vector<std::vector<uint32_t>> history_;
};

// Whether a compile status reports one of xgrammar's internal checks (XGRAMMAR_ICHECK: "Internal
// check failed: (cond) is false: ..."), a broken invariant of xgrammar rather than bad input. The
// message is "<context>: <xgrammar's message>", and xgrammar's message may quote the input (which
// can hold any text), so only its start counts.
bool IsInternalCheckFailure(absl::string_view message) {
  const size_t colon = message.find(": ");
  return colon != absl::string_view::npos &&
         absl::StartsWith(message.substr(colon + 2), "Internal check failed");
}

Constraint ConstraintFrom(uint8_t form, absl::string_view text) {
  constexpr Constraint::Kind kKinds[] = {Constraint::kJsonSchema, Constraint::kJsonObject,
                                         Constraint::kRegex, Constraint::kChoice,
                                         Constraint::kGrammar};
  Constraint constraint;
  constraint.kind = kKinds[form % 5];
  if (constraint.kind == Constraint::kChoice) {
    constraint.choices = absl::StrSplit(text, kChoiceSeparator);
  } else if (constraint.kind != Constraint::kJsonObject) {
    constraint.spec = std::string(text);
  }
  return constraint;
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size < 1) return 0;
  const Fixture& fixture = GetFixture();
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t spec_end = std::min(rest.find('\0'), rest.size());
  if (spec_end > kMaxSpecBytes) return 0;
  const Constraint constraint = ConstraintFrom(data[0], rest.substr(0, spec_end));

  GrammarCompiler& compiler = *fixture.compilers[data[0] / 5 % 3];
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
      compiler.Compile(constraint, kCompileDeadline);
  const absl::Duration elapsed = absl::Now() - start;
  if (elapsed > kCompileDeadline + kReturnSlack) {
    ReportViolation(constraint, "",
                    absl::StrCat("Compile returned after ", absl::FormatDuration(elapsed)));
  }
  if (!compiled.ok()) {
    const absl::Status& status = compiled.status();
    if (status.code() != absl::StatusCode::kInvalidArgument || status.message().empty() ||
        IsInternalCheckFailure(status.message())) {
      ReportViolation(constraint, "", absl::StrCat("Compile failed with ", status.ToString()));
    }
    return 0;
  }
  absl::StatusOr<std::unique_ptr<Matcher>> matcher = Matcher::Create(*compiled);
  if (!matcher.ok()) ReportViolation(constraint, "", matcher.status().ToString());
  Walk walk(constraint, fixture.vocabulary, *std::move(matcher));
  const absl::string_view steps = rest.substr(std::min(spec_end + 1, rest.size()));
  for (size_t i = 0; i + 1 < steps.size() && i / 2 < kMaxSteps; i += 2) {
    walk.Step(static_cast<uint8_t>(steps[i]), static_cast<uint8_t>(steps[i + 1]));
  }
  return 0;
}
