#include "tokenizer/tool_call_stream_parser.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "nlohmann/json.hpp"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

using Json = nlohmann::json;

bool IsSpace(char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); }

// (absl::string_view is not std::string_view in the Abseil this builds with.)
std::string_view Trim(std::string_view text) {
  const absl::string_view trimmed =
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  return std::string_view(trimmed.data(), trimmed.size());
}

// `rest` is shorter than `marker` and could be its beginning.
bool BeginsMarker(std::string_view rest, std::string_view marker) {
  return rest.size() < marker.size() && marker.substr(0, rest.size()) == rest;
}

// Where to look for `marker` once more text has come after `text`, which does not hold it: the
// marker may straddle the two.
size_t MarkerSearchFrom(std::string_view text, std::string_view marker) {
  return text.size() - std::min(text.size(), marker.size() - 1);
}

}  // namespace

ToolCallStreamParser::ToolCallStreamParser(Mode mode)
    : mode_(mode),
      state_(mode == Mode::kNone                                   ? State::kContentOnly
             : mode == Mode::kCallList || mode == Mode::kArguments ? State::kBeforeValue
                                                                   : State::kContent) {}

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format)
    : ToolCallStreamParser(format == ToolCallFormat::kHermes       ? Mode::kHermes
                           : format == ToolCallFormat::kLlama3Json ? Mode::kLlama3Json
                           : format == ToolCallFormat::kMistral    ? Mode::kMistral
                                                                   : Mode::kNone) {}

ToolCallStreamParser ToolCallStreamParser::CallList() {
  return ToolCallStreamParser(Mode::kCallList);
}

ToolCallStreamParser ToolCallStreamParser::Arguments(std::string name) {
  ToolCallStreamParser parser(Mode::kArguments);
  parser.forced_name_ = std::move(name);
  return parser;
}

std::vector<ToolCallDelta> ToolCallStreamParser::Append(std::string_view text) {
  text_.append(text);
  Scan();
  return TakeDeltas();
}

std::vector<ToolCallDelta> ToolCallStreamParser::Finish() {
  switch (state_) {
    case State::kContent:      // no marker, or no '{'
    case State::kBeforeValue:  // a marker or a ';' with no call after it
    case State::kValue:        // JSON cut off
      Fail();
      break;
    case State::kAfterValue:  // Hermes: a call whose closing tag was cut off still counts
      break;
    case State::kBetween:
      AddContentAfterCall(std::string_view(text_).substr(between_begin_));
      break;
    case State::kContentOnly:
      break;
  }
  if (calls_.empty()) Fail();
  return TakeDeltas();
}

ParsedToolCalls ToolCallStreamParser::Parse(std::string_view text) {
  Append(text);
  Finish();
  return Result();
}

ParsedToolCalls ToolCallStreamParser::Result() const {
  if (content_only()) return {text_, {}};
  ParsedToolCalls out;
  if (marker_at_ != std::string::npos) {
    out.content = std::string(Trim(std::string_view(text_).substr(0, marker_at_)));
  }
  if (!content_after_calls_.empty()) {
    if (!out.content.empty()) out.content += "\n";
    out.content += content_after_calls_;
  }
  for (const Call& call : calls_) {
    out.calls.push_back(ChatToolCall{.id = "", .name = call.name, .arguments = call.arguments});
  }
  return out;
}

size_t ToolCallStreamParser::content_end() const {
  if (content_only()) return text_.size();
  size_t end = 0;
  if (mode_ == Mode::kHermes || mode_ == Mode::kMistral) {
    end = marker_at_;
    if (end == std::string::npos) {
      const std::string_view marker =
          mode_ == Mode::kHermes ? kHermesToolCallOpen : kMistralToolCallMarker;
      end = text_.size();
      for (size_t k = std::min(marker.size() - 1, text_.size()); k > 0; --k) {
        if (BeginsMarker(std::string_view(text_).substr(text_.size() - k), marker)) {
          end = text_.size() - k;
          break;
        }
      }
    }
  }
  while (end > 0 && IsSpace(text_[end - 1])) --end;
  return end;
}

void ToolCallStreamParser::Scan() {
  while (pos_ < text_.size()) {
    switch (state_) {
      case State::kContent:
        if (!ScanContent()) return;
        break;
      case State::kBeforeValue:
        if (IsSpace(text_[pos_])) {
          ++pos_;
        } else {
          BeginValue();
        }
        break;
      case State::kValue: {
        const JsonScanner::Step step = scanner_.Feed(text_[pos_]);
        if (step.error) {
          Fail();
          return;
        }
        OnStep(step);
        if (step.taken) ++pos_;
        if (state_ == State::kValue && scanner_.done()) state_ = State::kAfterValue;
        break;
      }
      case State::kAfterValue:
        if (!ScanAfterValue()) return;
        break;
      case State::kBetween: {
        const size_t at = text_.find(kHermesToolCallOpen, search_from_);
        if (at == std::string::npos) {
          search_from_ = std::max(search_from_, MarkerSearchFrom(text_, kHermesToolCallOpen));
          return;
        }
        AddContentAfterCall(std::string_view(text_).substr(between_begin_, at - between_begin_));
        pos_ = at + kHermesToolCallOpen.size();
        state_ = State::kBeforeValue;
        break;
      }
      case State::kContentOnly:
        return;
    }
  }
}

bool ToolCallStreamParser::ScanContent() {
  if (mode_ == Mode::kLlama3Json) {
    while (pos_ < text_.size() && IsSpace(text_[pos_])) ++pos_;
    const std::string_view rest = std::string_view(text_).substr(pos_);
    if (rest.empty() || BeginsMarker(rest, kLlama3PythonTag)) return false;
    if (rest.substr(0, kLlama3PythonTag.size()) == kLlama3PythonTag) {
      pos_ += kLlama3PythonTag.size();
    } else if (rest.front() != '{') {
      Fail();
      return false;
    }
    state_ = State::kBeforeValue;
    return true;
  }
  const std::string_view marker =
      mode_ == Mode::kHermes ? kHermesToolCallOpen : kMistralToolCallMarker;
  const size_t at = text_.find(marker, search_from_);
  if (at == std::string::npos) {
    search_from_ = std::max(search_from_, MarkerSearchFrom(text_, marker));
    return false;
  }
  marker_at_ = at;
  pos_ = at + marker.size();
  state_ = State::kBeforeValue;
  return true;
}

void ToolCallStreamParser::BeginValue() {
  const char first = text_[pos_];
  const bool list_allowed = mode_ == Mode::kMistral || mode_ == Mode::kCallList;
  if (first != '{' && !(first == '[' && list_allowed)) {
    Fail();
    return;
  }
  scanner_ = JsonScanner();
  call_depth_ = mode_ == Mode::kArguments ? -1 : first == '[' ? 1 : 0;
  if (mode_ == Mode::kArguments) {
    calls_.emplace_back();
    calls_.back().name = forced_name_;
    member_ = Member::kArguments;
  }
  state_ = State::kValue;
}

void ToolCallStreamParser::OnStep(const JsonScanner::Step& step) {
  if (step.depth == call_depth_ - 1) {
    if (step.ends && calls_.empty()) Fail();  // an empty list
    return;
  }
  if (step.depth == call_depth_) {
    if (step.begins) {
      if (text_[pos_] != '{') {  // a list's element that is not a call
        Fail();
        return;
      }
      calls_.emplace_back();
      call_begin_ = pos_;
      member_ = Member::kOther;
      has_name_ = has_arguments_ = false;
      arguments_form_ = ArgumentsForm::kNotYet;
    } else if (step.ends) {
      EndCall();
    }
    return;
  }
  if (step.depth != call_depth_ + 1) return;  // inside a member's value
  if (step.key) {
    if (step.ends) OnKey(scanner_.string_value());
  } else if (step.begins) {
    BeginMember(text_[pos_]);
  } else if (step.ends) {
    EndMember();
  }
}

void ToolCallStreamParser::OnKey(const std::string& key) {
  bool* seen = nullptr;
  if (key == "name") {
    member_ = Member::kName;
    seen = &has_name_;
  } else if (key == "arguments" || key == "parameters") {
    member_ = Member::kArguments;
    seen = &has_arguments_;
  } else {
    member_ = Member::kOther;
    return;
  }
  if (*seen) Fail();  // which one counts is not clear
  *seen = true;
}

void ToolCallStreamParser::BeginMember(char first) {
  if (member_ == Member::kName) {
    if (first != '"') Fail();
  } else if (member_ == Member::kArguments) {
    arguments_begin_ = pos_;
    arguments_form_ = first == '{'   ? ArgumentsForm::kObject
                      : first == '"' ? ArgumentsForm::kString
                      : first == 'n' ? ArgumentsForm::kNull
                                     : ArgumentsForm::kNotYet;
    if (arguments_form_ == ArgumentsForm::kNotYet) Fail();
  }
}

void ToolCallStreamParser::EndMember() {
  Call& call = calls_.back();
  if (member_ == Member::kName) {
    call.name = scanner_.string_value();
    if (call.name.empty()) Fail();
  } else if (member_ == Member::kArguments) {
    switch (arguments_form_) {
      case ArgumentsForm::kObject:
        call.arguments = text_.substr(arguments_begin_, pos_ + 1 - arguments_begin_);
        if (!Json::accept(call.arguments)) Fail();
        break;
      case ArgumentsForm::kString:  // JSON text: it counts when it is an object
        call.arguments = scanner_.string_value();
        if (!Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false).is_object()) Fail();
        break;
      case ArgumentsForm::kNull:
        call.arguments = "{}";
        break;
      case ArgumentsForm::kNotYet:
        break;
    }
    call.arguments_done = true;
  }
  member_ = Member::kOther;
}

void ToolCallStreamParser::EndCall() {
  Call& call = calls_.back();
  // The scanner leaves numbers and UTF-8 unchecked: the whole call must be JSON.
  if (call.name.empty() ||
      !Json::accept(std::string_view(text_).substr(call_begin_, pos_ + 1 - call_begin_))) {
    Fail();
    return;
  }
  if (!call.arguments_done) {
    call.arguments = "{}";
    call.arguments_done = true;
  }
}

bool ToolCallStreamParser::ScanAfterValue() {
  while (pos_ < text_.size() && IsSpace(text_[pos_])) ++pos_;
  if (pos_ == text_.size()) return false;
  const std::string_view rest = std::string_view(text_).substr(pos_);
  if (mode_ == Mode::kHermes) {
    if (BeginsMarker(rest, kHermesToolCallClose)) return false;
    if (rest.substr(0, kHermesToolCallClose.size()) == kHermesToolCallClose) {
      pos_ += kHermesToolCallClose.size();
      between_begin_ = search_from_ = pos_;
      state_ = State::kBetween;
      return true;
    }
  } else if (mode_ == Mode::kLlama3Json && rest.front() == ';') {
    ++pos_;
    state_ = State::kBeforeValue;
    return true;
  }
  Fail();
  return false;
}

void ToolCallStreamParser::AddContentAfterCall(std::string_view text) {
  text = Trim(text);
  if (text.empty()) return;
  if (!content_after_calls_.empty()) content_after_calls_ += "\n";
  content_after_calls_.append(text);
}

std::vector<ToolCallDelta> ToolCallStreamParser::TakeDeltas() {
  std::vector<ToolCallDelta> deltas;
  if (content_only()) return deltas;
  // What was read of the arguments of a call still being read (only ever added to).
  if (state_ == State::kValue && member_ == Member::kArguments && !calls_.empty() &&
      !calls_.back().arguments_done) {
    std::string& arguments = calls_.back().arguments;
    if (arguments_form_ == ArgumentsForm::kObject) {
      const size_t from = arguments_begin_ + arguments.size();
      arguments.append(text_, from, pos_ - from);
    } else if (arguments_form_ == ArgumentsForm::kString) {
      arguments.append(scanner_.string_value(), arguments.size());
    }
  }
  for (size_t k = first_unsent_call_; k < calls_.size(); ++k) {
    Call& call = calls_[k];
    if (call.name.empty()) break;  // its arguments wait for its name
    ToolCallDelta delta;
    delta.index = static_cast<int>(k);
    if (!call.name_sent) {
      delta.name = call.name;
      call.name_sent = true;
    }
    size_t ready = call.arguments.size();
    if (!call.arguments_done) {  // up to the last whole character (finished calls were checked)
      const std::string_view unsent = std::string_view(call.arguments).substr(call.arguments_sent);
      std::string valid;
      const size_t whole = AppendValidUtf8(unsent, /*final=*/false, &valid);
      if (valid != unsent.substr(0, whole)) {  // not UTF-8: never a call
        Fail();
        return {};
      }
      ready = call.arguments_sent + whole;
    }
    if (ready > call.arguments_sent) {
      delta.arguments = call.arguments.substr(call.arguments_sent, ready - call.arguments_sent);
      call.arguments_sent = ready;
    }
    if (!delta.name.empty() || !delta.arguments.empty()) deltas.push_back(std::move(delta));
    if (call.arguments_done && call.arguments_sent == call.arguments.size()) {
      first_unsent_call_ = k + 1;
    }
  }
  return deltas;
}

}  // namespace kvserve
