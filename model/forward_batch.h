// ForwardBatch: the attention metadata of one forward step over a flattened batch, as plain
// non-owning views; ForwardBatchBuilder: fills one from per-sequence pieces.
//
// A step holds T tokens from S sequences, laid out sequence after sequence. Sequence s owns the
// tokens [query_start[s], query_start[s + 1]): a prefill chunk (n > 1) or a decode (n = 1). After
// this step the cache holds context_lens[s] tokens of sequence s, so its i-th token of the step
// sits at position context_lens[s] - n + i. Each token's K/V go to slot_mapping[t]
// (slot = block_id * block_size + offset, -1 = padding: not written), and attention reads
// sequence s's cache only through its row of block_tables (see kvcache/kv_layout.h).
// Only the tokens listed in logit_rows get logits (usually the last token of each sequence whose
// prompt is complete).
//
// Thread-safety: a ForwardBatch is a view; the caller keeps the arrays alive and unchanged during
// LlamaModel::Forward. A builder is a plain value owned by one thread.
#ifndef KVSERVE_MODEL_FORWARD_BATCH_H_
#define KVSERVE_MODEL_FORWARD_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kvserve {

struct ForwardBatch {
  absl::Span<const int32_t> token_ids;     // [T]
  absl::Span<const int32_t> positions;     // [T], position of each token in its sequence
  absl::Span<const int32_t> slot_mapping;  // [T], -1 for padding
  absl::Span<const int32_t> query_start;   // [S + 1], query_start[0] = 0, query_start[S] <= T
  absl::Span<const int32_t> context_lens;  // [S]
  absl::Span<const int32_t> block_tables;  // [S, max_blocks_per_seq], row-major
  int32_t max_blocks_per_seq = 0;
  absl::Span<const int32_t> logit_rows;  // [R], token indices in [0, T) that need logits

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(context_lens.size()); }
  int32_t num_logit_rows() const { return static_cast<int32_t>(logit_rows.size()); }
};

// Which tokens of a sequence's step need logits.
enum class LogitsFor { kNone, kLast, kAll };

// Builds a ForwardBatch from sequences, turning each sequence's block table into slots.
// Storage is reserved once for (max_num_tokens, max_num_seqs); AddSequence never allocates
// within those limits.
class ForwardBatchBuilder {
 public:
  ForwardBatchBuilder(int32_t block_size, int32_t max_blocks_per_seq, int32_t max_num_tokens,
                      int32_t max_num_seqs);

  // Starts a new step (keeps the reserved storage).
  void Clear();

  // Appends one sequence's step: `tokens` at positions first_position, first_position + 1, ...
  // whose blocks are block_table (block_table[j] holds positions [j * block_size, (j + 1) *
  // block_size)). Its logit rows, if any, are appended in order after those of earlier sequences.
  // INVALID_ARGUMENT when block_table does not cover the new positions, is longer than
  // max_blocks_per_seq, or a limit would be exceeded.
  absl::Status AddSequence(absl::Span<const int32_t> tokens, int32_t first_position,
                           absl::Span<const int32_t> block_table, LogitsFor logits);

  // A view of what was added so far; valid until the next Clear/AddSequence.
  ForwardBatch View() const;

  int32_t block_size() const { return block_size_; }
  int32_t max_blocks_per_seq() const { return max_blocks_per_seq_; }

 private:
  int32_t block_size_;
  int32_t max_blocks_per_seq_;
  int32_t max_num_tokens_;
  int32_t max_num_seqs_;
  std::vector<int32_t> token_ids_;     // [T]
  std::vector<int32_t> positions_;     // [T]
  std::vector<int32_t> slot_mapping_;  // [T]
  std::vector<int32_t> query_start_;   // [S + 1]
  std::vector<int32_t> context_lens_;  // [S]
  std::vector<int32_t> block_tables_;  // [S, max_blocks_per_seq], 0-padded
  std::vector<int32_t> logit_rows_;    // [R]
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_FORWARD_BATCH_H_
