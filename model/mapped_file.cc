#include "model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a regular file", err != 0 ? ": " : "", err != 0 ? std::strerror(err) : ""));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("mmap ", path, ": ", std::strerror(err)));
    }
  }
  ::close(fd);
  return std::unique_ptr<MappedFile>(new MappedFile(path, static_cast<const char*>(data), size));
}

void MappedFile::DropPages(const char* begin, size_t bytes) const {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo =
      std::max(reinterpret_cast<uintptr_t>(begin), reinterpret_cast<uintptr_t>(data_));
  const uintptr_t hi = std::min(reinterpret_cast<uintptr_t>(begin) + bytes,
                                reinterpret_cast<uintptr_t>(data_) + size_);
  if (data_ == nullptr || hi <= lo) return;
  const uintptr_t first = (lo + page - 1) / page * page;
  const uintptr_t end = hi / page * page;
  if (end > first) {
    ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);  // advice only
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
}

}  // namespace kvserve
