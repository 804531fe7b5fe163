#include "tokenizer/detokenizer.h"

#include "tokenizer/unicode.h"

namespace kvserve {

std::string IncrementalDetokenizer::Push(int32_t id) {
  tokenizer_.AppendTokenBytes(id, skip_special_, &pending_);
  if (at_start_ && !pending_.empty()) {
    at_start_ = false;
    if (tokenizer_.strips_leading_space() && pending_[0] == ' ') pending_.erase(0, 1);
  }
  std::string delta;
  pending_.erase(0, AppendValidUtf8(pending_, /*final=*/false, &delta));
  return delta;
}

std::string IncrementalDetokenizer::Flush() {
  std::string delta;
  AppendValidUtf8(pending_, /*final=*/true, &delta);
  pending_.clear();
  return delta;
}

}  // namespace kvserve
