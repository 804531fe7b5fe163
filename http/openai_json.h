// Reading an OpenAI-style JSON request body: the body parsed as an ordered JSON object, typed
// access to its fields, and INVALID_ARGUMENT statuses that name the field ("temperature: must be
// a number, got string"). Shared by the request mapping (openai_mapping.cc) and its tool and
// structured-output parts (openai_tools.cc).
//
// Thread-safety: pure functions; a Fields reads the object it was given, which must outlive it.
#ifndef KVSERVE_HTTP_OPENAI_JSON_H_
#define KVSERVE_HTTP_OPENAI_JSON_H_

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"

namespace kvserve::openai {

// Ordered: tool schemas reach the chat template with their keys in the client's order.
using Json = nlohmann::ordered_json;

// INVALID_ARGUMENT "<field>: <message>".
absl::Status Invalid(absl::string_view field, absl::string_view message);
// "must be <expected>, got <the JSON type of value>".
absl::Status WrongType(absl::string_view field, absl::string_view expected, const Json& value);
// The body as a JSON object; INVALID_ARGUMENT naming "body" otherwise.
absl::StatusOr<Json> ParseBody(absl::string_view body);

// Typed access to the fields of a request object; null counts as absent.
class Fields {
 public:
  explicit Fields(const Json& object) : object_(object) {}

  const Json* Find(const char* name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::Status String(const char* name, std::optional<std::string>* out) const {
    return Typed(name, &Json::is_string, "a string", out);
  }

  absl::Status Bool(const char* name, std::optional<bool>* out) const {
    return Typed(name, &Json::is_boolean, "a boolean", out);
  }

  absl::Status Number(const char* name, std::optional<double>* out) const {
    return Typed(name, &Json::is_number, "a number", out);
  }

  absl::Status Int64(const char* name, std::optional<int64_t>* out) const {
    const Json* value = Find(name);
    if (value == nullptr) return absl::OkStatus();
    if (value->is_number_unsigned() &&
        value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(name, "integer out of range");
    }
    if (!value->is_number_integer()) return WrongType(name, "an integer", *value);
    *out = value->get<int64_t>();
    return absl::OkStatus();
  }

  // An integer that fits int32; range rules beyond that are the validation library's.
  absl::Status Int32(const char* name, std::optional<int32_t>* out) const {
    std::optional<int64_t> wide;
    KVSERVE_RETURN_IF_ERROR(Int64(name, &wide));
    if (!wide.has_value()) return absl::OkStatus();
    if (*wide < std::numeric_limits<int32_t>::min() ||
        *wide > std::numeric_limits<int32_t>::max()) {
      return Invalid(name, absl::StrCat("integer out of range, got ", *wide));
    }
    *out = static_cast<int32_t>(*wide);
    return absl::OkStatus();
  }

 private:
  // The field as T when `is_type` says it has the JSON type `expected` names.
  template <typename T>
  absl::Status Typed(const char* name, bool (Json::*is_type)() const, const char* expected,
                     std::optional<T>* out) const {
    const Json* value = Find(name);
    if (value == nullptr) return absl::OkStatus();
    if (!(value->*is_type)()) return WrongType(name, expected, *value);
    *out = value->get<T>();
    return absl::OkStatus();
  }

  const Json& object_;
};

}  // namespace kvserve::openai

#endif  // KVSERVE_HTTP_OPENAI_JSON_H_
