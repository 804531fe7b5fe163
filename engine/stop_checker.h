// StopChecker: finds stop strings in a choice's streamed text without ever letting one leak.
//
// Text arrives in deltas (from the incremental detokenizer). The checker releases text as soon
// as it is known not to be part of a stop string; the longest tail that is a prefix of some stop
// string is held back until the next delta decides it. When a stop string matches (possibly
// split across many deltas) the text before it is released (plus the stop string itself when
// include_stop_str_in_output) and everything after it is dropped. The cut is always at a UTF-8
// character boundary, because a held-back tail starts where a stop string starts.
//
// Thread-safety: one instance per choice, one thread at a time.
#ifndef KVSERVE_ENGINE_STOP_CHECKER_H_
#define KVSERVE_ENGINE_STOP_CHECKER_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

class StopChecker {
 public:
  StopChecker(std::vector<std::string> stop_strings, bool include_stop_str_in_output);

  struct Result {
    std::string text;               // released text, possibly empty
    std::optional<size_t> stopped;  // index into stop_strings of the match, if one matched
  };

  // Adds a delta. After a match the checker is done: later calls release nothing.
  Result Push(std::string_view delta);

  // Releases the held-back tail (the choice finished for another reason).
  std::string Flush();

  bool stopped() const { return stopped_; }
  size_t held_bytes() const { return held_.size(); }
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }

 private:
  // Length of the longest suffix of text that is a proper prefix of some stop string.
  size_t PossibleStopPrefixLength(std::string_view text) const;

  std::vector<std::string> stop_strings_;
  bool include_stop_;
  size_t max_stop_len_ = 0;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_STOP_CHECKER_H_
