// The server: acceptor, signals, the generator's events dispatched to their connections, drain.
#include "server/server.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "server/detail/http_session.h"

namespace ib {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

class ServerImpl final : public Server {
 public:
  ServerImpl(ServerOptions options, std::unique_ptr<Generator> generator,
             std::unique_ptr<Tokenizer> tokenizer)
      : options_(std::move(options)),
        generator_(std::move(generator)),
        tokenizer_(std::move(tokenizer)) {}

  ~ServerImpl() override {
    generator_->stop();  // no event is posted to io_ after this
    // A prompt being tokenized finishes; queued ones are dropped with their connections.
    encode_pool_.stop();
    encode_pool_.join();
    if (core_) core_->live.clear();
  }

  Status start() override {
    IB_TRY(generator_->start([this](std::vector<GenEvent>&& events) {
      net::post(io_, [this, evs = std::move(events)] { dispatch(evs); });
    }));
    ServedModel served;
    served.name =
        options_.served_model_name.empty() ? generator_->model().name : options_.served_model_name;
    served.max_model_len = generator_->max_model_len();
    served.vocab_size = generator_->model().vocab_size;
    for (const auto& [name, path] : generator_->initial_loras()) {
      served.lora_adapters.push_back({name, path});
    }
    core_ = std::make_unique<detail::ServerCore>(io_, options_, *generator_, *tokenizer_, served);
    core_->created_unix_s = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    core_->on_generation_done = [this] { check_drained(); };
    core_->encode_pool = &encode_pool_;
    if (!options_.trace.endpoint.empty()) {
      IB_ASSIGN_OR_RETURN(tracer_, make_tracer(options_.trace));
      core_->tracer = tracer_.get();
    }

    boost::system::error_code ec;
    const auto address = net::ip::make_address(options_.host, ec);
    if (ec) {
      return user_error(fmt::format("--host {}: not an IP address; use e.g. 127.0.0.1 or 0.0.0.0",
                                    options_.host));
    }
    const tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return user_error(fmt::format("cannot listen on {}:{}: {}; choose another --port or --host",
                                    options_.host, options_.port, ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    if (options_.handle_signals) {
      signals_.emplace(io_, SIGINT, SIGTERM);
      wait_signal();
    }
    accept();
    return Ok{};
  }

  uint16_t port() const override { return port_; }

  void run() override {
    io_.run();
    for (auto& [id, session] : core_->live) session->close();
    core_->live.clear();
    generator_->stop();
    if (tracer_) tracer_->shutdown();  // the last spans, within the export timeout
  }

  void request_drain() override {
    net::post(io_, [this] { begin_drain(); });
  }

  void request_stop() override {
    net::post(io_, [this] { stop_now(); });
  }

  std::string describe() const override { return generator_->describe(); }

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (!acceptor_.is_open()) return;
      if (!ec) {
        std::make_shared<detail::Session>(std::move(socket), *core_)->start();
        return accept();
      }
      // Out of file descriptors or a transient failure: retry shortly instead of spinning.
      retry_.expires_after(std::chrono::milliseconds(50));
      retry_.async_wait([this](boost::system::error_code) {
        if (acceptor_.is_open()) accept();
      });
    });
  }

  void wait_signal() {
    signals_->async_wait([this](boost::system::error_code ec, int) {
      if (ec) return;
      if (++signal_count_ == 1) {
        std::fprintf(stderr,
                     "inferbench: draining %d in-flight request(s); signal again to "
                     "abort them\n",
                     core_->metrics.open_streams);
        begin_drain();
        wait_signal();
      } else {
        stop_now();
      }
    });
  }

  void dispatch(const std::vector<GenEvent>& events) {
    for (const GenEvent& e : events) {
      auto it = core_->live.find(e.id);
      if (it == core_->live.end()) continue;  // aborted or finished by a stop string
      std::shared_ptr<detail::Session> session = it->second;
      session->on_event(e);
    }
  }

  void begin_drain() {
    core_->draining = true;
    boost::system::error_code ec;
    acceptor_.close(ec);
    retry_.cancel();
    check_drained();
  }

  void check_drained() {
    if (core_->draining && core_->metrics.open_streams == 0) stop_now();
  }

  void stop_now() {
    boost::system::error_code ec;
    acceptor_.close(ec);
    if (signals_) signals_->cancel(ec);
    io_.stop();
  }

  ServerOptions options_;
  std::unique_ptr<Generator> generator_;
  std::unique_ptr<Tokenizer> tokenizer_;
  // Prompt rendering and tokenization (ServerCore::encode_pool): a quarter of the cores, 2 to 4,
  // leaving the rest to the engine (the CPU backend's threads) and the I/O thread; two at least,
  // so one very long prompt does not hold up the others.
  net::thread_pool encode_pool_{
      std::clamp<size_t>(std::thread::hardware_concurrency() / 4, size_t{2}, size_t{4})};
  net::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  net::steady_timer retry_{io_};
  std::optional<net::signal_set> signals_;
  int signal_count_ = 0;
  uint16_t port_ = 0;
  std::unique_ptr<Tracer> tracer_;            // --otlp-endpoint; outlives the sessions
  std::unique_ptr<detail::ServerCore> core_;  // destroyed first: sessions reference io_
};

}  // namespace

std::unique_ptr<Server> make_server(ServerOptions options, std::unique_ptr<Generator> generator,
                                    std::unique_ptr<Tokenizer> tokenizer) {
  return std::make_unique<ServerImpl>(std::move(options), std::move(generator),
                                      std::move(tokenizer));
}

int64_t raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
    (void)getrlimit(RLIMIT_NOFILE, &limit);
  }
  return static_cast<int64_t>(limit.rlim_cur);
}

}  // namespace ib
