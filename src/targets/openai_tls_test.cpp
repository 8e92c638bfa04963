// HTTPS: the openai target through a TLS-terminating proxy (a self-signed certificate made with
// the openssl tool) in front of the real server. Certificates are verified unless told not to.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <filesystem>

#include <boost/asio/ssl.hpp>

#include "runner/runner.h"
#include "server/detail/test_support.h"
#include "targets/openai_target.h"

namespace ib {
namespace {

namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

// Accepts TLS on a loopback port and relays each connection to a plain TCP port.
class TlsProxy {
 public:
  TlsProxy(uint16_t target_port, const std::string& cert, const std::string& key)
      : target_(net::ip::make_address("127.0.0.1"), target_port) {
    ctx_.use_certificate_chain_file(cert);
    ctx_.use_private_key_file(key, ssl::context::pem);
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TlsProxy() {
    io_.stop();
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  struct Pipe : std::enable_shared_from_this<Pipe> {
    Pipe(tcp::socket s, ssl::context& ctx, net::io_context& io)
        : tls(std::move(s), ctx), plain(io) {}
    void start(tcp::endpoint target) {
      tls.async_handshake(ssl::stream_base::server, [self = shared_from_this(), target](auto ec) {
        if (ec) return;
        self->plain.async_connect(target, [self](auto e) {
          if (e) return;
          self->tls_to_plain();
          self->plain_to_tls();
        });
      });
    }
    void tls_to_plain() {
      tls.async_read_some(net::buffer(a), [self = shared_from_this()](auto ec, size_t n) {
        if (ec) return self->plain.close();
        net::async_write(self->plain, net::buffer(self->a, n), [self](auto e, size_t) {
          if (!e) self->tls_to_plain();
        });
      });
    }
    void plain_to_tls() {
      plain.async_read_some(net::buffer(b), [self = shared_from_this()](auto ec, size_t n) {
        if (ec) return self->tls.lowest_layer().close();
        net::async_write(self->tls, net::buffer(self->b, n), [self](auto e, size_t) {
          if (!e) self->plain_to_tls();
        });
      });
    }
    ssl::stream<tcp::socket> tls;
    tcp::socket plain;
    std::array<char, 16384> a{};
    std::array<char, 16384> b{};
  };

  void accept() {
    acceptor_.async_accept([this](auto ec, tcp::socket s) {
      if (ec) return;
      std::make_shared<Pipe>(std::move(s), ctx_, io_)->start(target_);
      accept();
    });
  }

  net::io_context io_;
  ssl::context ctx_{ssl::context::tls_server};
  tcp::acceptor acceptor_{io_, {net::ip::make_address("127.0.0.1"), 0}};
  tcp::endpoint target_;
  std::thread thread_;
};

std::vector<RequestRecord> run_https(const std::string& url, bool verify) {
  OpenAITargetOptions o;
  o.base_url = url;
  o.model = "null";
  o.verify_tls = verify;
  auto target = make_openai_target(o);
  EXPECT_TRUE(target.ok());
  SteadyRunnerClock clock;
  RunnerOptions r;
  r.mode = LoadMode::kStatic;
  r.batch_size = 4;
  r.runs = 1;
  Runner runner(**target, r, clock);
  EXPECT_TRUE((*target)->setup(runner.callbacks()).ok());
  std::vector<RequestSpec> requests;
  for (int i = 0; i < 8; ++i) {
    RequestSpec s;
    s.prompt_text = "secure" + std::to_string(i);
    s.input_len = static_cast<int>(s.prompt_text.size());
    s.output_len = 5;
    requests.push_back(s);
  }
  auto records = runner.run(requests, RunnerHooks{});
  (*target)->teardown();
  return records.ok() && !records->runs.empty() ? records->runs[0] : std::vector<RequestRecord>{};
}

TEST(OpenAiTls, StreamsOverHttpsAndVerifiesCertificatesByDefault) {
  const auto dir = std::filesystem::temp_directory_path() / "ib_openai_tls_test";
  std::filesystem::create_directories(dir);
  const std::string cert = (dir / "cert.pem").string();
  const std::string key = (dir / "key.pem").string();
  const std::string make_cert =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "
      "/CN=127.0.0.1 -keyout " +
      key + " -out " + cert + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(make_cert.c_str()), 0)
      << "the openssl tool is needed (scripts/install-deps)";
  testing::RunningServer server(make_null_generator(0));
  TlsProxy proxy(server.port(), cert, key);
  const std::string url = "https://127.0.0.1:" + std::to_string(proxy.port());

  const auto ok = run_https(url, /*verify=*/false);
  ASSERT_EQ(ok.size(), 8u);
  for (const auto& r : ok) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.n_out, 5);
    EXPECT_EQ(r.chunks, 5);
  }
  const auto refused = run_https(url, /*verify=*/true);  // self-signed: not trusted
  ASSERT_EQ(refused.size(), 8u);
  for (const auto& r : refused) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error.rfind("TLS handshake", 0), 0u) << r.error;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ib
