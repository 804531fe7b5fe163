// Tool calls read as the model writes them: text goes in piece by piece (Append) and out come
// the calls' deltas, a call's name once it is whole, then its arguments in pieces as they are
// written, never past the end of the arguments value; Finish() ends the output. Whatever the
// pieces, the deltas join to the calls of Result(), and Result() is the same as for the whole
// text at once (ParseToolCalls in tool_call_parser.h is this parser given the whole output).
//
// What an output may hold (tool_call_parser.h has the formats):
//   a model's format:  content, then calls in that format's markup;
//   CallList():        a JSON list of calls, or one call (tool_choice "required");
//   Arguments(name):   the arguments object of the one named function (a named tool_choice).
// A call is a JSON object with a non-empty string "name" and "arguments" (or "parameters"): an
// object, JSON text of an object in a string, null or absent (both "{}"). Other keys are left
// alone; a second name or arguments key makes the output hold no calls. A call's arguments are
// the text of its arguments value as written (for a string: its decoded text). A Hermes call
// whose closing tag is cut off, wholly or in part, still counts.
//
// An output that does not hold well-formed calls (no marker, JSON that breaks, a call cut off) is
// content only: Result() gives the whole text as it is, and no more deltas come. Deltas already
// given for a call that breaks or is cut off after its name stay given; a stream's reader goes by
// the finish reason, which says "tool_calls" only when Result() has calls.
//
// Thread-safety: not thread-safe; one per output.
#ifndef KVSERVE_TOKENIZER_TOOL_CALL_STREAM_PARSER_H_
#define KVSERVE_TOKENIZER_TOOL_CALL_STREAM_PARSER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_scanner.h"
#include "tokenizer/tool_call_parser.h"

namespace kvserve {

// One step of a streamed call.
struct ToolCallDelta {
  int index = 0;          // the call's place among the output's calls: 0, 1, ...
  std::string name;       // on the call's first delta only
  std::string arguments;  // the next piece of its arguments text (may be empty)
};

class ToolCallStreamParser {
 public:
  // Calls in `format`'s markup; kNone: the output is content.
  explicit ToolCallStreamParser(ToolCallFormat format);
  static ToolCallStreamParser CallList();
  static ToolCallStreamParser Arguments(std::string name);

  // Takes the next piece of the output; returns the deltas it completes, at most one per call.
  // A piece of arguments ends on a whole UTF-8 character. REQUIRES: Finish() not called.
  std::vector<ToolCallDelta> Append(std::string_view text);
  // The output has ended: the last deltas, none when the output turns out to be content only.
  std::vector<ToolCallDelta> Finish();
  // The calls and the content besides them (content only: the whole text, no calls).
  // REQUIRES: Finish() called.
  ParsedToolCalls Result() const;
  // A whole output: Append, Finish, Result. REQUIRES: nothing appended yet.
  ParsedToolCalls Parse(std::string_view text);

  // How much of the text so far may go out as content while streaming: up to the format's
  // marker (or a tail that may begin it), without trailing white space; nothing of a list or
  // of arguments; all of it once the output cannot hold calls.
  size_t content_end() const;
  // The output so far.
  const std::string& text() const { return text_; }
  // The output cannot hold calls (final once Finish() has been called).
  bool content_only() const { return state_ == State::kContentOnly; }

 private:
  enum class Mode { kNone, kHermes, kLlama3Json, kMistral, kCallList, kArguments };
  enum class State {
    kContent,      // before the first call: Hermes and Mistral look for their marker, Llama 3
                   // for '{' (or <|python_tag|>)
    kBeforeValue,  // white space, then the JSON value: a call, a list (Mistral, CallList), or
                   // the arguments object
    kValue,        // in it (scanner_)
    kAfterValue,   // after it: Hermes's closing tag, Llama 3's ';', or white space
    kBetween,      // Hermes: the text after a closing tag, up to the next call's opening tag
    kContentOnly,
  };
  // What a key of a call object names.
  enum class Member { kOther, kName, kArguments };
  enum class ArgumentsForm { kNotYet, kObject, kString, kNull };
  struct Call {
    std::string name;       // "" until whole
    std::string arguments;  // the text so far
    bool arguments_done = false;
    bool name_sent = false;
    size_t arguments_sent = 0;  // bytes of `arguments` given out in deltas
  };

  explicit ToolCallStreamParser(Mode mode);

  // Reads text_ from pos_ as far as it can tell what it is.
  void Scan();
  bool ScanContent();     // false: more text is needed
  bool ScanAfterValue();  // false: more text is needed
  void BeginValue();
  void OnStep(const JsonScanner::Step& step);
  void OnKey(const std::string& key);
  void BeginMember(char first);
  void EndMember();
  void EndCall();
  void AddContentAfterCall(std::string_view text);
  void Fail() { state_ = State::kContentOnly; }
  // The deltas for what was read since the last call.
  std::vector<ToolCallDelta> TakeDeltas();

  Mode mode_;
  std::string forced_name_;  // kArguments
  std::string text_;
  size_t pos_ = 0;  // text_[0, pos_) has been read
  State state_;
  size_t marker_at_ = std::string::npos;  // Hermes, Mistral: where the first marker begins
  size_t search_from_ = 0;                // Hermes, Mistral: where to look for the next marker
  size_t between_begin_ = 0;              // kBetween: where the text after a call begins
  std::string content_after_calls_;       // Hermes: that text, trimmed, joined by '\n'

  JsonScanner scanner_;
  int call_depth_ = 0;  // the scanner's depth of call objects: 0, 1 in a list, -1 for kArguments
  size_t call_begin_ = 0;
  Member member_ = Member::kOther;  // the key of the member being read
  bool has_name_ = false;
  bool has_arguments_ = false;
  ArgumentsForm arguments_form_ = ArgumentsForm::kNotYet;
  size_t arguments_begin_ = 0;
  std::vector<Call> calls_;
  size_t first_unsent_call_ = 0;  // calls before it have been given out whole
};

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_TOOL_CALL_STREAM_PARSER_H_
