#include "model/served_model_name.h"

#include <cctype>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvserve {
namespace {

constexpr absl::string_view kSyntheticPrefix = "synthetic:";

bool AllDigits(absl::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// `stem` without a trailing "-NNNNN-of-NNNNN".
absl::string_view WithoutShard(absl::string_view stem) {
  const size_t of = stem.rfind("-of-");
  if (of == absl::string_view::npos || !AllDigits(stem.substr(of + 4))) return stem;
  const size_t dash = stem.rfind('-', of == 0 ? 0 : of - 1);
  if (dash == absl::string_view::npos || dash == 0 ||
      !AllDigits(stem.substr(dash + 1, of - dash - 1))) {
    return stem;
  }
  return stem.substr(0, dash);
}

// `stem` without a trailing ".<encoding>" or "-<encoding>".
absl::string_view WithoutEncoding(absl::string_view stem) {
  const size_t separator = stem.find_last_of(".-");
  if (separator == absl::string_view::npos || separator == 0) return stem;
  if (!IsGgufEncodingName(stem.substr(separator + 1))) return stem;
  return stem.substr(0, separator);
}

std::string WithoutWhiteSpace(absl::string_view text) {
  std::string out(absl::StripAsciiWhitespace(text));
  for (char& c : out) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) c = '-';
  }
  return out;
}

}  // namespace

bool IsGgufEncodingName(absl::string_view part) {
  const std::string name = absl::AsciiStrToUpper(part);
  if (name == "F32" || name == "F16" || name == "BF16" || name == "F64") return true;
  // Q<bits>[_<variant>]..., IQ<bits>_..., TQ<bits>_<n>: a letter prefix, digits, then
  // '_'-separated groups of letters and digits.
  absl::string_view rest = name;
  if (!absl::ConsumePrefix(&rest, "Q") && !absl::ConsumePrefix(&rest, "IQ") &&
      !absl::ConsumePrefix(&rest, "TQ")) {
    return false;
  }
  size_t digits = 0;
  while (digits < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[digits]))) {
    ++digits;
  }
  if (digits == 0) return false;
  rest.remove_prefix(digits);
  while (!rest.empty()) {
    if (rest[0] != '_' || rest.size() == 1) return false;
    rest.remove_prefix(1);
    size_t group = 0;
    while (group < rest.size() && absl::ascii_isalnum(static_cast<unsigned char>(rest[group]))) {
      ++group;
    }
    if (group == 0 || group > 3) return false;
    rest.remove_prefix(group);
  }
  return true;
}

std::string DefaultServedModelName(absl::string_view spec) {
  if (absl::StartsWith(spec, kSyntheticPrefix)) {
    absl::string_view preset = spec.substr(kSyntheticPrefix.size());
    preset = preset.substr(0, preset.find(':'));
    return WithoutWhiteSpace(absl::StrCat("synthetic-", preset));
  }
  absl::string_view path = spec;
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  absl::string_view name = slash == absl::string_view::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {  // "./", "models/..": the directory's name
    std::error_code error;
    const std::filesystem::path canonical =
        std::filesystem::weakly_canonical(std::filesystem::path(std::string(spec)), error);
    std::string resolved = error ? "" : canonical.filename().string();
    if (resolved.empty() && !error) resolved = canonical.parent_path().filename().string();
    return WithoutWhiteSpace(resolved.empty() ? spec : resolved);
  }
  if (absl::EndsWithIgnoreCase(name, ".gguf")) {
    name.remove_suffix(5);
    name = WithoutEncoding(WithoutShard(name));
  }
  return WithoutWhiteSpace(name);
}

}  // namespace kvserve
