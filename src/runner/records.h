// RequestRecord: everything measured about one request, on the one clock (core/clock.h).
// Definitions: docs/metrics.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ib {

struct RequestRecord {
  int run = 0;                          // run index (0-based); kWarmupRun for warm-up requests
  uint64_t id = 0;                      // the id the target saw (unique across the whole benchmark)
  uint64_t prompt_index = 0;            // index of the request in the workload
  int64_t t_sched_ns = 0;               // scheduled arrival (open loop) or the decision to send
  int64_t t_send_ns = 0;                // just before submit
  int64_t t_first_ns = 0;               // first content token (0: none)
  int64_t t_end_ns = 0;                 // last token, or the failure time when no token came
  std::vector<int64_t> token_times_ns;  // (tokens received): every token's arrival
  int chunks = 0;                       // callbacks that delivered tokens
  int n_in = 0;                         // prompt tokens (as the target counted them)
  int n_out_requested = 0;
  int n_out = 0;  // output tokens (as the target counted them)
  bool ok = false;
  std::string finish_reason;  // "length", "stop", "aborted", "error"
  std::string error;          // empty when ok
  std::string lora_name;      // the LoRA adapter it asked for; empty: the base model
  // Vision-language models on the native target (docs/metrics.md): the prompt's visual tokens,
  // its images' time in the vision encoder, when the engine first scheduled its prefill (0:
  // unknown), and the KV cache bytes of its tokens. TTFT splits into queue (t_send to
  // t_scheduled), encode, and prefill (the rest).
  int visual_tokens = 0;
  int64_t encode_ns = 0;
  int64_t t_scheduled_ns = 0;
  int64_t kv_bytes = 0;

  int64_t ttft_ns() const { return t_first_ns - t_send_ns; }
  int64_t e2el_ns() const { return t_end_ns - t_send_ns; }
  int64_t queue_ns() const { return t_send_ns - t_sched_ns; }
  // The TTFT split, where the engine reported t_scheduled_ns (and a first token came).
  int64_t ttft_queue_ns() const { return t_scheduled_ns - t_send_ns; }
  int64_t ttft_prefill_ns() const { return t_first_ns - t_scheduled_ns - encode_ns; }
  // (t_end - t_first) / (n_out - 1) in ms; 0 when n_out <= 1 (vLLM's goodput convention).
  double tpot_ms() const;
};

inline constexpr int kWarmupRun = -1;

// Appends a chunk of num_tokens tokens that arrived at time_ns. The tokens of a chunk after the
// first are spread evenly over the gap since the previous chunk (docs/metrics.md); the tokens of
// the first chunk all take its arrival time.
void add_chunk(RequestRecord& record, int num_tokens, int64_t time_ns);

}  // namespace ib
