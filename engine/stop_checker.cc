#include "engine/stop_checker.h"

#include <algorithm>
#include <utility>

namespace kvserve {

StopChecker::StopChecker(std::vector<std::string> stop_strings, bool include_stop_str_in_output)
    : stop_strings_(std::move(stop_strings)), include_stop_(include_stop_str_in_output) {
  for (const std::string& stop : stop_strings_)
    max_stop_len_ = std::max(max_stop_len_, stop.size());
}

size_t StopChecker::PossibleStopPrefixLength(std::string_view text) const {
  const size_t longest = std::min(text.size(), max_stop_len_ == 0 ? 0 : max_stop_len_ - 1);
  for (size_t len = longest; len > 0; --len) {
    const std::string_view tail = text.substr(text.size() - len);
    for (const std::string& stop : stop_strings_) {
      if (stop.size() > len && std::string_view(stop).substr(0, len) == tail) return len;
    }
  }
  return 0;
}

StopChecker::Result StopChecker::Push(std::string_view delta) {
  Result result;
  if (stopped_) return result;
  if (stop_strings_.empty()) {
    result.text.assign(delta);
    return result;
  }
  held_.append(delta);
  // The earliest match wins; among matches at the same position, the first listed.
  size_t best_pos = std::string::npos;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const size_t pos = held_.find(stop_strings_[i]);
    if (pos != std::string::npos && pos < best_pos) {
      best_pos = pos;
      result.stopped = i;
    }
  }
  if (result.stopped.has_value()) {
    const size_t end = include_stop_ ? best_pos + stop_strings_[*result.stopped].size() : best_pos;
    result.text = held_.substr(0, end);
    held_.clear();
    stopped_ = true;
    return result;
  }
  const size_t keep = PossibleStopPrefixLength(held_);
  result.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopChecker::Flush() {
  std::string text = std::move(held_);
  held_.clear();
  return text;
}

}  // namespace kvserve
