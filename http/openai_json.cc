#include "http/openai_json.h"

namespace kvserve::openai {
namespace {

const char* TypeName(const Json& value) {
  if (value.is_number_integer()) return "integer";
  return value.type_name();  // "null", "boolean", "string", "array", "object", "number"
}

}  // namespace

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

absl::Status WrongType(absl::string_view field, absl::string_view expected, const Json& value) {
  return Invalid(field, absl::StrCat("must be ", expected, ", got ", TypeName(value)));
}

absl::StatusOr<Json> ParseBody(absl::string_view body) {
  Json json = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    // Parse again for the parser's message (byte position, invalid UTF-8, ...); no exception
    // leaves this function.
    try {
      const Json ignored = Json::parse(body.begin(), body.end());
      (void)ignored;
    } catch (const Json::parse_error& e) {
      return Invalid("body", absl::StrCat("not valid JSON: ", e.what()));
    }
    return Invalid("body", "not valid JSON");
  }
  if (!json.is_object()) return WrongType("body", "a JSON object", json);
  return json;
}

}  // namespace kvserve::openai
