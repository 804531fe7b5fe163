// gMock matchers on absl::Status and absl::StatusOr<T> alike, for the C++ tests (header-only;
// a test that includes this links GTest::gmock):
//   EXPECT_THAT(status, IsOk());
//   EXPECT_THAT(status_or, StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("config.json")));
//   KVSERVE_ASSERT_OK(expr);  KVSERVE_EXPECT_OK(expr);  // both take << for more context
// A failure prints the status (for a StatusOr too, which gtest cannot print by itself). The code
// and message arguments of StatusIs are values or matchers (`::testing::_` for any code).
#ifndef KVSERVE_TESTS_STATUS_MATCHERS_H_
#define KVSERVE_TESTS_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::testing {
namespace status_matchers_internal {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// gtest prints an absl::Status as the matched value; a StatusOr it prints as bytes, so the
// matchers explain a StatusOr's status themselves.
template <typename T>
struct IsStatusOr : std::false_type {};
template <typename T>
struct IsStatusOr<absl::StatusOr<T>> : std::true_type {};

template <typename StatusType>
void ExplainStatusOr(const absl::Status& status, ::testing::MatchResultListener* listener) {
  if constexpr (IsStatusOr<std::decay_t<StatusType>>::value) {
    *listener << "whose status is " << status;
  }
}

class IsOkMatcher {
 public:
  template <typename StatusType>
  bool MatchAndExplain(const StatusType& actual, ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(actual);
    ExplainStatusOr<StatusType>(status, listener);
    return status.ok();
  }
  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

class StatusIsMatcher {
 public:
  explicit StatusIsMatcher(::testing::Matcher<absl::StatusCode> code)
      : code_(std::move(code)), message_(::testing::_), any_message_(true) {}
  StatusIsMatcher(::testing::Matcher<absl::StatusCode> code,
                  ::testing::Matcher<const std::string&> message)
      : code_(std::move(code)), message_(std::move(message)), any_message_(false) {}

  template <typename StatusType>
  bool MatchAndExplain(const StatusType& actual, ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(actual);
    ExplainStatusOr<StatusType>(status, listener);
    return code_.Matches(status.code()) && message_.Matches(std::string(status.message()));
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has a status code that ";
    code_.DescribeTo(os);
    if (any_message_) return;
    *os << ", and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "has a status code that ";
    code_.DescribeNegationTo(os);
    if (any_message_) return;
    *os << ", or a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  ::testing::Matcher<absl::StatusCode> code_;
  ::testing::Matcher<const std::string&> message_;
  bool any_message_;  // StatusIs(code): the description leaves the message out
};

}  // namespace status_matchers_internal

// Matches an OK absl::Status, or an absl::StatusOr<T> that holds a value.
inline ::testing::PolymorphicMatcher<status_matchers_internal::IsOkMatcher> IsOk() {
  return ::testing::MakePolymorphicMatcher(status_matchers_internal::IsOkMatcher());
}

// Matches a status (of an absl::Status or an absl::StatusOr<T>) whose code matches `code` and
// whose message matches `message` (anything when not given).
template <typename CodeMatcher, typename MessageMatcher>
::testing::PolymorphicMatcher<status_matchers_internal::StatusIsMatcher> StatusIs(
    CodeMatcher&& code, MessageMatcher&& message) {
  return ::testing::MakePolymorphicMatcher(status_matchers_internal::StatusIsMatcher(
      ::testing::MatcherCast<absl::StatusCode>(std::forward<CodeMatcher>(code)),
      ::testing::MatcherCast<const std::string&>(std::forward<MessageMatcher>(message))));
}

template <typename CodeMatcher>
::testing::PolymorphicMatcher<status_matchers_internal::StatusIsMatcher> StatusIs(
    CodeMatcher&& code) {
  return ::testing::MakePolymorphicMatcher(status_matchers_internal::StatusIsMatcher(
      ::testing::MatcherCast<absl::StatusCode>(std::forward<CodeMatcher>(code))));
}

}  // namespace kvserve::testing

// Fail (ASSERT: and return) unless `expr`, an absl::Status or absl::StatusOr<T>, is OK.
#define KVSERVE_ASSERT_OK(expr) ASSERT_THAT(expr, ::kvserve::testing::IsOk())
#define KVSERVE_EXPECT_OK(expr) EXPECT_THAT(expr, ::kvserve::testing::IsOk())

#endif  // KVSERVE_TESTS_STATUS_MATCHERS_H_
