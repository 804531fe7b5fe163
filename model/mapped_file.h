// MappedFile: a whole file mapped read-only into memory (mmap), unmapped on destruction. The
// model readers (GGUF, safetensors) parse straight from these bytes, so weights are paged in on
// first touch and never copied before dequantization. Immutable; safe to read from any thread.
#ifndef KVSERVE_MODEL_MAPPED_FILE_H_
#define KVSERVE_MODEL_MAPPED_FILE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvserve {

class MappedFile {
 public:
  // NOT_FOUND when the file cannot be opened (message names the path and errno text).
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The file's bytes; valid while this object lives. Empty for an empty file.
  std::string_view bytes() const { return std::string_view(data_, size_); }
  const std::string& path() const { return path_; }

  // Drops this process's mapping of the pages wholly inside [begin, begin + bytes) and inside
  // bytes() (madvise MADV_DONTNEED): resident memory shrinks, and a later read faults the same
  // bytes back in from the file. A range outside the mapping drops nothing.
  void DropPages(const char* begin, size_t bytes) const;

 private:
  MappedFile(std::string path, const char* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const char* data_;  // [size_] from mmap, or nullptr when size_ is 0
  size_t size_;
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_MAPPED_FILE_H_
