// Result<T>: the return type of every operation that can fail for a reason a user can act on.
// A broken invariant is not a Result: it is IB_ASSERT (assert.h).
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "core/assert.h"

namespace ib {

// What kind of failure; the CLI maps kUser to exit code 2 and everything else to 1.
enum class ErrorKind {
  kUser,      // bad flag, unknown model, malformed input file: the user can fix it
  kRuntime,   // I/O failure, device error, out of memory during a run
  kInternal,  // a bug surfaced as an error rather than an abort
};

struct Error {
  ErrorKind kind = ErrorKind::kUser;
  std::string message;  // one line: names the problem and, where possible, the fix
};

inline Error user_error(std::string message) { return Error{ErrorKind::kUser, std::move(message)}; }
inline Error runtime_error(std::string message) {
  return Error{ErrorKind::kRuntime, std::move(message)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    IB_ASSERT(ok(), error_message_or_empty());
    return std::get<0>(v_);
  }
  const T& value() const& {
    IB_ASSERT(ok(), error_message_or_empty());
    return std::get<0>(v_);
  }
  T&& value() && {
    IB_ASSERT(ok(), error_message_or_empty());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    IB_ASSERT(!ok(), "error() called on a successful Result");
    return std::get<1>(v_);
  }

 private:
  const char* error_message_or_empty() const {
    return ok() ? "" : std::get<1>(v_).message.c_str();
  }
  std::variant<T, Error> v_;
};

// Result<void>: success carries nothing.
struct Ok {};
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Ok) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    IB_ASSERT(!ok_, "error() called on a successful Result");
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace ib

// Propagates an error from an expression returning Result<...>.
#define IB_TRY(expr)                                \
  do {                                              \
    auto ib_try_result_ = (expr);                   \
    if (!ib_try_result_.ok()) return ib_try_result_.error(); \
  } while (0)

#define IB_CONCAT_INNER(a, b) a##b
#define IB_CONCAT(a, b) IB_CONCAT_INNER(a, b)
// IB_ASSIGN_OR_RETURN(auto x, make_x()): binds the value or returns the error.
#define IB_ASSIGN_OR_RETURN(decl, expr) \
  IB_ASSIGN_OR_RETURN_IMPL(IB_CONCAT(ib_result_, __LINE__), decl, expr)
#define IB_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.error();              \
  decl = std::move(tmp).value()
