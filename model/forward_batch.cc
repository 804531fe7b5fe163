#include "model/forward_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve {

ForwardBatchBuilder::ForwardBatchBuilder(int32_t block_size, int32_t max_blocks_per_seq,
                                         int32_t max_num_tokens, int32_t max_num_seqs)
    : block_size_(block_size),
      max_blocks_per_seq_(max_blocks_per_seq),
      max_num_tokens_(max_num_tokens),
      max_num_seqs_(max_num_seqs) {
  token_ids_.reserve(max_num_tokens);
  positions_.reserve(max_num_tokens);
  slot_mapping_.reserve(max_num_tokens);
  logit_rows_.reserve(max_num_tokens);
  query_start_.reserve(max_num_seqs + 1);
  context_lens_.reserve(max_num_seqs);
  block_tables_.reserve(static_cast<size_t>(max_num_seqs) * max_blocks_per_seq);
  Clear();
}

void ForwardBatchBuilder::Clear() {
  token_ids_.clear();
  positions_.clear();
  slot_mapping_.clear();
  query_start_.assign(1, 0);
  context_lens_.clear();
  block_tables_.clear();
  logit_rows_.clear();
}

absl::Status ForwardBatchBuilder::AddSequence(absl::Span<const int32_t> tokens,
                                              int32_t first_position,
                                              absl::Span<const int32_t> block_table,
                                              LogitsFor logits) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  const int64_t context_len = static_cast<int64_t>(first_position) + n;
  if (first_position < 0 || static_cast<int64_t>(block_table.size()) * block_size_ < context_len ||
      static_cast<int32_t>(block_table.size()) > max_blocks_per_seq_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block table of ", block_table.size(), " blocks (max ", max_blocks_per_seq_,
        ") does not hold positions up to ", context_len, " at block size ", block_size_));
  }
  if (static_cast<int32_t>(token_ids_.size()) + n > max_num_tokens_ ||
      static_cast<int32_t>(context_lens_.size()) + 1 > max_num_seqs_) {
    return absl::InvalidArgumentError(absl::StrCat("batch would exceed ", max_num_tokens_,
                                                   " tokens or ", max_num_seqs_, " sequences"));
  }
  const int32_t first_row = static_cast<int32_t>(token_ids_.size());
  for (int32_t i = 0; i < n; ++i) {
    const int32_t position = first_position + i;
    token_ids_.push_back(tokens[i]);
    positions_.push_back(position);
    slot_mapping_.push_back(block_table[position / block_size_] * block_size_ +
                            position % block_size_);
  }
  query_start_.push_back(first_row + n);
  context_lens_.push_back(static_cast<int32_t>(context_len));
  block_tables_.insert(block_tables_.end(), block_table.begin(), block_table.end());
  block_tables_.resize(context_lens_.size() * max_blocks_per_seq_, 0);
  if (logits == LogitsFor::kAll) {
    for (int32_t i = 0; i < n; ++i) logit_rows_.push_back(first_row + i);
  } else if (logits == LogitsFor::kLast && n > 0) {
    logit_rows_.push_back(first_row + n - 1);
  }
  return absl::OkStatus();
}

ForwardBatch ForwardBatchBuilder::View() const {
  return ForwardBatch{.token_ids = token_ids_,
                      .positions = positions_,
                      .slot_mapping = slot_mapping_,
                      .query_start = query_start_,
                      .context_lens = context_lens_,
                      .block_tables = block_tables_,
                      .max_blocks_per_seq = max_blocks_per_seq_,
                      .logit_rows = logit_rows_};
}

}  // namespace kvserve
