// The HTTP(S) exchanges of the openai target, on its event loop: a pool of keep-alive
// connections, one streamed request per connection at a time. Everything here runs on the
// loop's thread; the target posts start() and cancel_all() to it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "targets/openai_target.h"

namespace ib::detail {

struct ClientJob {
  uint64_t id = 0;
  std::string request;  // the serialized HTTP request
  int64_t submit_ns = 0;
  // Requested, to report mismatches against usage; 0: not known to the client (a request with
  // images, whose usage counts the server's visual tokens).
  int input_len = 0;
  int output_len = 0;
};

struct ClientCompletion {
  uint64_t id = 0;
  std::vector<std::pair<int64_t, int>> chunks;  // (arrival ns, tokens) per content chunk
  RequestOutcome outcome;
  std::string text;  // only with keep_text
};

// Loop-thread counters; the target reads them on the loop thread too.
struct ClientStats {
  int64_t events = 0;                      // SSE events read
  int64_t bytes = 0;                       // response body bytes
  int64_t busy_ns = 0;                     // time spent in read handlers
  std::vector<int64_t> dispatch_delay_ns;  // submit() to the request's first byte written
  int64_t with_usage = 0;
  int64_t without_usage = 0;
  int64_t output_mismatch = 0;  // usage.completion_tokens != requested output length
  int64_t input_mismatch = 0;   // usage.prompt_tokens != requested input length
  int64_t connections_opened = 0;
  int64_t stale_reconnects = 0;  // a pooled connection the server had closed
};

struct ClientConfig {
  BaseUrl url;
  double timeout_s = 3600;
  bool keep_text = false;
  bool verify_tls = true;
};

class Client {
 public:
  using DoneFn = std::function<void(ClientCompletion&&)>;
  virtual ~Client() = default;
  virtual void start(ClientJob job) = 0;
  // Ends every exchange in flight; each completes with finish_reason "aborted".
  virtual void cancel_all() = 0;
};

// A plain or TLS client (by config.url.tls). ssl may be null for plain HTTP.
std::unique_ptr<Client> make_client(boost::asio::io_context& io, boost::asio::ssl::context* ssl,
                                    boost::asio::ip::tcp::resolver::results_type endpoints,
                                    ClientConfig config, ClientStats& stats, Client::DoneFn done);

}  // namespace ib::detail
