#include "tp/tp_messages.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvserve {
namespace {

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}

  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_->append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  template <typename T>
  void PutArray(const std::vector<T>& values) {
    Put<uint32_t>(static_cast<uint32_t>(values.size()));
    out_->append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }

 private:
  std::string* out_;
};

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  bool Get(T* value) {
    if (bytes_.size() < sizeof(T)) return false;
    std::memcpy(value, bytes_.data(), sizeof(T));
    bytes_.remove_prefix(sizeof(T));
    return true;
  }
  template <typename T>
  bool GetArray(std::vector<T>* values) {
    uint32_t count = 0;
    if (!Get(&count) || bytes_.size() / sizeof(T) < count) return false;
    values->resize(count);
    // An empty vector's data() may be null, which memcpy must not get even for 0 bytes.
    if (count > 0) std::memcpy(values->data(), bytes_.data(), count * sizeof(T));
    bytes_.remove_prefix(count * sizeof(T));
    return true;
  }
  size_t left() const { return bytes_.size(); }

 private:
  std::string_view bytes_;
};

void PutConfig(const RunnerConfig& c, Writer& w) {
  w.Put(c.block_size);
  w.Put(c.num_blocks);
  w.Put(c.num_host_blocks);
  w.Put(c.max_num_batched_tokens);
  w.Put(c.max_num_seqs);
  w.Put(c.max_context_len);
}

bool GetConfig(Reader& r, RunnerConfig* c) {
  return r.Get(&c->block_size) && r.Get(&c->num_blocks) && r.Get(&c->num_host_blocks) &&
         r.Get(&c->max_num_batched_tokens) && r.Get(&c->max_num_seqs) && r.Get(&c->max_context_len);
}

void PutSampling(const SequenceSampling& s, Writer& w) {
  const kernels::SamplingParams& p = s.params;
  w.Put(p.temperature);
  w.Put(p.top_k);
  w.Put(p.top_p);
  w.Put(p.min_p);
  w.Put(p.repetition_penalty);
  w.Put(p.presence_penalty);
  w.Put(p.frequency_penalty);
  w.Put(p.seed);
  w.Put(p.num_logprobs);
  w.Put(s.num_prompt_tokens);
  w.Put<uint8_t>(s.logprobs ? 1 : 0);
}

bool GetSampling(Reader& r, SequenceSampling* s) {
  kernels::SamplingParams& p = s->params;
  uint8_t logprobs = 0;
  const bool ok = r.Get(&p.temperature) && r.Get(&p.top_k) && r.Get(&p.top_p) && r.Get(&p.min_p) &&
                  r.Get(&p.repetition_penalty) && r.Get(&p.presence_penalty) &&
                  r.Get(&p.frequency_penalty) && r.Get(&p.seed) && r.Get(&p.num_logprobs) &&
                  r.Get(&s->num_prompt_tokens) && r.Get(&logprobs);
  s->logprobs = logprobs != 0;
  return ok;
}

void PutPlan(const StepPlan& plan, Writer& w) {
  w.Put(plan.step_id);
  w.PutArray(plan.released);
  w.Put<uint32_t>(static_cast<uint32_t>(plan.host_copies.size()));
  for (const HostCopy& copy : plan.host_copies) {
    w.Put<uint8_t>(copy.to_host ? 1 : 0);
    w.Put(copy.device);
    w.Put(copy.host);
  }
  w.Put<uint32_t>(static_cast<uint32_t>(plan.block_copies.size()));
  for (const BlockCopy& copy : plan.block_copies) {
    w.Put(copy.src);
    w.Put(copy.dst);
  }
  w.Put<uint32_t>(static_cast<uint32_t>(plan.sequences.size()));
  for (const ScheduledSequence& seq : plan.sequences) {
    w.Put(seq.id);
    w.Put<uint8_t>((seq.is_new ? 1 : 0) | (seq.sample ? 2 : 0));
    w.PutArray(seq.token_ids);
    w.PutArray(seq.block_ids);
    w.Put(seq.num_scheduled_tokens);
    if (seq.is_new) {
      w.Put(seq.num_computed_tokens);
      PutSampling(seq.sampling, w);
    }
  }
}

bool GetPlan(Reader& r, StepPlan* plan) {
  uint32_t count = 0;
  if (!r.Get(&plan->step_id) || !r.GetArray(&plan->released) || !r.Get(&count)) return false;
  if (r.left() / (1 + sizeof(BlockId) + sizeof(HostBlockId)) < count) return false;
  plan->host_copies.resize(count);
  for (HostCopy& copy : plan->host_copies) {
    uint8_t to_host = 0;
    if (!r.Get(&to_host) || !r.Get(&copy.device) || !r.Get(&copy.host)) return false;
    copy.to_host = to_host != 0;
  }
  if (!r.Get(&count) || r.left() / (2 * sizeof(BlockId)) < count) return false;
  plan->block_copies.resize(count);
  for (BlockCopy& copy : plan->block_copies) {
    if (!r.Get(&copy.src) || !r.Get(&copy.dst)) return false;
  }
  if (!r.Get(&count) || r.left() / sizeof(SequenceId) < count) return false;
  plan->sequences.resize(count);
  for (ScheduledSequence& seq : plan->sequences) {
    uint8_t flags = 0;
    if (!r.Get(&seq.id) || !r.Get(&flags) || !r.GetArray(&seq.token_ids) ||
        !r.GetArray(&seq.block_ids) || !r.Get(&seq.num_scheduled_tokens)) {
      return false;
    }
    seq.is_new = (flags & 1) != 0;
    seq.sample = (flags & 2) != 0;
    if (seq.is_new && (!r.Get(&seq.num_computed_tokens) || !GetSampling(r, &seq.sampling))) {
      return false;
    }
  }
  return true;
}

}  // namespace

void EncodeTpMessage(TpCommand command, std::string* out) {
  Writer(out).Put(static_cast<uint8_t>(command));
}

void EncodeTpMessage(TpCommand command, const RunnerConfig& config, std::string* out) {
  Writer w(out);
  w.Put(static_cast<uint8_t>(command));
  PutConfig(config, w);
}

void EncodeTpMessage(const StepPlan& plan, std::string* out) {
  Writer w(out);
  w.Put(static_cast<uint8_t>(TpCommand::kExecute));
  PutPlan(plan, w);
}

absl::StatusOr<TpMessage> DecodeTpMessage(std::string_view bytes) {
  Reader r(bytes);
  TpMessage message;
  uint8_t command = 0;
  if (!r.Get(&command) || command > static_cast<uint8_t>(TpCommand::kStop)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel message of ", bytes.size(), " bytes has no valid command"));
  }
  message.command = static_cast<TpCommand>(command);
  bool ok = true;
  switch (message.command) {
    case TpCommand::kProfile:
    case TpCommand::kInitialize:
      ok = GetConfig(r, &message.config);
      break;
    case TpCommand::kExecute:
      ok = GetPlan(r, &message.plan);
      break;
    case TpCommand::kKeepAlive:
    case TpCommand::kStop:
      break;
  }
  if (!ok || r.left() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel message (command ", command,
                                                   ") of ", bytes.size(), " bytes is malformed"));
  }
  return message;
}

}  // namespace kvserve
