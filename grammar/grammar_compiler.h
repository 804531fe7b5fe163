// GrammarCompiler: turns a request's Constraint into a CompiledConstraint for one model's
// vocabulary. One per model, built at start-up; Compile is called per request and remembers its
// results, so a schema that many requests share is compiled once.
//
// Compiling is the expensive part of structured output (for every state of the grammar it sorts
// the whole vocabulary into always / never / depends-on-context), milliseconds for a small
// schema and seconds for a large one. xgrammar offers no way to stop a compile, so each compile
// runs on a thread of its own and Compile waits for it at most `timeout`: past that the caller
// gets DEADLINE_EXCEEDED while the compile carries on in the background and lands in the cache,
// where a later request with the same constraint finds it. A compile that never ends (not seen,
// but not ruled out for a hostile grammar) keeps its thread and a CPU until the process exits;
// `max_background_compiles` bounds how many such threads there can be.
//
// Errors: INVALID_ARGUMENT naming the problem for a schema, regex or grammar that cannot be
// compiled (and for kNone or an empty choice list); DEADLINE_EXCEEDED as above;
// RESOURCE_EXHAUSTED when max_background_compiles compiles are already running.
//
// Thread-safety: Compile may be called from any number of threads at once.
#ifndef KVSERVE_GRAMMAR_GRAMMAR_COMPILER_H_
#define KVSERVE_GRAMMAR_GRAMMAR_COMPILER_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grammar/constraint.h"
#include "grammar/vocabulary.h"

namespace xgrammar {
class GrammarCompiler;
}  // namespace xgrammar

namespace kvserve {

class CompiledConstraint;  // grammar/compiled_constraint.h

struct GrammarCompilerOptions {
  // Threads one compile uses to sort the vocabulary for the grammar's states.
  int threads_per_compile = 1;
  // Compiles (finished, failed or running) the cache keeps; the least recently asked-for goes
  // first. Each holds its token masks: tens of KB to a few MB.
  size_t max_cached = 256;
  // Compiles running at once, including those whose callers timed out.
  int max_background_compiles = 8;
  // JSON: whitespace the model may put between tokens of the syntax. With any_whitespace false
  // the output is compact (", " and ": " separators, no newlines).
  bool json_any_whitespace = true;
  // With any_whitespace, the longest run of whitespace allowed at one place (0: no limit). A
  // small model left free tends to emit newlines for ever; a bound ends that.
  int json_max_whitespace = 0;
};

class GrammarCompiler {
 public:
  // INVALID_ARGUMENT when `vocabulary` is not valid (grammar/vocabulary.h).
  static absl::StatusOr<std::unique_ptr<GrammarCompiler>> Create(
      const GrammarVocabulary& vocabulary, const GrammarCompilerOptions& options = {});
  ~GrammarCompiler();

  // The compiled form of `constraint`, from the cache when the same constraint (kind and text)
  // was compiled before: then the very same object. Waits at most `timeout` for a compile.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(const Constraint& constraint,
                                                                    absl::Duration timeout);

  // Drops every cached result (compiles still running finish into nothing). For benchmarks.
  void ClearCache();
  size_t cache_size() const;

  int32_t vocab_size() const { return vocab_size_; }

 private:
  struct CacheEntry;   // one compile's outcome, shared with its thread
  struct SharedState;  // what the compile threads use; outlives this object while they run

  GrammarCompiler(int32_t vocab_size, const GrammarCompilerOptions& options,
                  std::shared_ptr<SharedState> shared);
  // The cache entry of `key`, made and its compile started when absent. Null with *status set
  // when a compile was needed but none may start.
  std::shared_ptr<CacheEntry> FindOrStart(const std::string& key, const Constraint& constraint,
                                          absl::Status* status);
  void TouchLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t vocab_size_;
  const GrammarCompilerOptions options_;
  const std::shared_ptr<SharedState> shared_;

  mutable absl::Mutex mu_;
  // Keys by last use, most recent first; every key of entries_ is in it once.
  std::list<std::string> recency_ ABSL_GUARDED_BY(mu_);
  struct Slot {
    std::shared_ptr<CacheEntry> entry;
    std::list<std::string>::iterator recency;
  };
  absl::flat_hash_map<std::string, Slot> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_GRAMMAR_GRAMMAR_COMPILER_H_
