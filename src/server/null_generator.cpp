// The null model: echoes each request's prompt at a fixed per-request token rate, without
// computing anything, so a client's own overhead can be measured against a server that costs
// (almost) nothing. Token k (from 0) of a request is prompt[k mod prompt length], produced
// (k + 1) / rate seconds after the request arrived.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "core/clock.h"
#include "server/detail/request_inbox.h"
#include "server/generator.h"

namespace ib {
namespace {

constexpr int kNullVocab = 32000;
constexpr int kNullContext = 1 << 20;
constexpr size_t kMaxBatch = 4096;  // events handed to the sink at once

ModelConfig null_model() {
  ModelConfig m;
  m.name = "null";
  m.family = "null";
  m.vocab_size = kNullVocab;
  m.max_position_embeddings = kNullContext;
  m.bos_token_id = 1;
  m.eos_token_ids = {2};
  return m;
}

class NullGenerator final : public Generator {
 public:
  explicit NullGenerator(double tokens_per_s)
      : model_(null_model()),
        interval_ns_(tokens_per_s > 0 ? static_cast<int64_t>(1e9 / tokens_per_s) : 0),
        tokens_per_s_(tokens_per_s) {}
  ~NullGenerator() override { stop(); }

  Status start(EventSink sink) override {
    IB_ASSERT(!thread_.joinable(), "NullGenerator::start called twice");
    sink_ = std::move(sink);
    thread_ = std::thread([this] { loop(); });
    return Ok{};
  }

  void submit(GenerationRequest request) override { inbox_.submit(std::move(request)); }
  void abort(uint64_t id) override { inbox_.abort(id); }

  GeneratorStats stats() const override {
    std::lock_guard lock(mu_);
    GeneratorStats s;
    s.running = running_;
    return s;
  }

  void stop() override {
    inbox_.stop();
    if (thread_.joinable()) thread_.join();
  }

  const ModelConfig& model() const override { return model_; }
  int max_model_len() const override { return kNullContext; }
  std::string describe() const override {
    return tokens_per_s_ > 0 ? fmt::format("null model at {} tokens/s per request", tokens_per_s_)
                             : std::string("null model, unpaced");
  }

 private:
  struct Stream {
    GenerationRequest request;
    int emitted = 0;
    int64_t taken_ns = 0;  // when the generator took it: the "prefill" of the first token
  };
  using Due = std::pair<int64_t, uint64_t>;  // (time_ns, id)

  void loop() {
    std::vector<GenerationRequest> incoming;
    std::vector<uint64_t> aborts;
    for (;;) {
      std::optional<int64_t> wait_ns;  // until the next token is due; none: until a request
      if (!due_.empty()) wait_ns = std::max<int64_t>(0, due_.top().first - now_ns());
      if (!inbox_.take(incoming, aborts, wait_ns)) return;
      const int64_t t = now_ns();
      for (auto& r : incoming) {
        const uint64_t id = r.id;
        live_[id] = Stream{std::move(r), 0, t};
        due_.push({t + interval_ns_, id});  // like a model: the first token after one interval
      }
      incoming.clear();
      for (uint64_t id : aborts) live_.erase(id);
      aborts.clear();
      emit_due();
      std::lock_guard lock(mu_);
      running_ = static_cast<int>(live_.size());
    }
  }

  void emit_due() {
    std::vector<GenEvent> events;
    while (!due_.empty() && due_.top().first <= now_ns()) {
      const auto [when, id] = due_.top();
      due_.pop();
      auto it = live_.find(id);
      if (it == live_.end()) continue;  // aborted
      Stream& s = it->second;
      const auto& prompt = s.request.prompt_tokens;
      const int32_t token = prompt[static_cast<size_t>(s.emitted) % prompt.size()];
      ++s.emitted;
      const bool eos = !s.request.ignore_eos && token == model_.eos_token_ids[0];
      const bool last = eos || s.emitted >= s.request.max_tokens;
      const FinishReason finish = eos    ? FinishReason::kStop
                                  : last ? FinishReason::kLength
                                         : FinishReason::kNone;
      events.push_back(GenEvent{id, token, now_ns(), finish, {}, s.emitted == 1 ? s.taken_ns : 0});
      if (last) {
        live_.erase(it);
      } else {
        due_.push({when + interval_ns_, id});
      }
      if (events.size() >= kMaxBatch) sink_(std::exchange(events, {}));
    }
    if (!events.empty()) sink_(std::move(events));
  }

  const ModelConfig model_;
  const int64_t interval_ns_;
  const double tokens_per_s_;
  EventSink sink_;
  std::thread thread_;

  detail::RequestInbox inbox_;
  mutable std::mutex mu_;
  int running_ = 0;  // guarded by mu_

  // Generator thread only.
  std::unordered_map<uint64_t, Stream> live_;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
};

}  // namespace

std::unique_ptr<Generator> make_null_generator(double tokens_per_s) {
  return std::make_unique<NullGenerator>(tokens_per_s);
}

}  // namespace ib
