// State shared by the server and its connections. Everything here is touched on the I/O thread
// only (the generator's events and the encode pool's results are posted to it), so nothing is
// locked; the encode pool reads only the immutable tokenizer and options.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "server/detail/prometheus.h"
#include "server/server.h"
#include "trace/trace.h"

namespace ib::detail {

class Session;

struct ServerCore {
  ServerCore(boost::asio::io_context& io_context, const ServerOptions& server_options,
             Generator& gen, const Tokenizer& tok, ServedModel model)
      : io(io_context),
        options(server_options),
        generator(gen),
        tokenizer(tok),
        served(std::move(model)) {}

  boost::asio::io_context& io;
  const ServerOptions& options;
  Generator& generator;
  const Tokenizer& tokenizer;
  // Where prompts are rendered and tokenized, off the I/O thread (the tokenizer and the chat
  // template are immutable, so any thread may use them); nullptr: on the I/O thread.
  boost::asio::thread_pool* encode_pool = nullptr;
  ServedModel served;
  int64_t created_unix_s = 0;
  ServerMetrics metrics;
  // Requests the generator is working on, by id: their events go to these sessions.
  std::unordered_map<uint64_t, std::shared_ptr<Session>> live;
  uint64_t next_id = 1;
  bool draining = false;
  std::function<void()> on_generation_done;  // after each generation response completes
  Tracer* tracer = nullptr;                  // --otlp-endpoint: request spans; null: off

  void count_response(int status) { ++metrics.responses[status]; }
};

}  // namespace ib::detail
