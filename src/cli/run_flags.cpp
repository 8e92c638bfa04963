// The flags of `inferbench run`.
#include "cli/run_options.h"

namespace ib {

void add_run_flags(CLI::App& app, RunFlags& f) {
  app.add_option("--model", f.model,
                 "preset name, HF repo id, a directory with config.json, or a .gguf file")
      ->capture_default_str();
  app.add_option("--backend", f.backend, "target plugin (`inferbench plugins`)")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed of prompts, arrivals, dummy weights and sampling")
      ->capture_default_str();
  app.add_option("--num-prompts", f.num_prompts, "requests per run")->capture_default_str();
  app.add_option("--request-rate", f.request_rate,
                 "open loop: requests per second (inf sends all at once)")
      ->capture_default_str();
  app.add_option("--burstiness", f.burstiness,
                 "gamma shape of inter-arrival gaps (1 = Poisson, larger = more regular)")
      ->capture_default_str();
  app.add_option("--max-concurrency", f.max_concurrency,
                 "closed loop: requests in flight (caps an open loop when a rate is given)");
  app.add_option("--percentile-metrics", f.percentile_metrics,
                 "metrics shown with percentiles: ttft,tpot,itl,e2el,client_queue_time,"
                 "e2el_including_client_queue")
      ->capture_default_str();
  app.add_option("--metric-percentiles", f.metric_percentiles, "comma-separated percentiles")
      ->capture_default_str();
  app.add_option("--goodput", f.goodput, "SLOs in ms, e.g. ttft:200,tpot:50,e2el:5000");
  app.add_option("--result-dir", f.result_dir, "default: results/<model>-<utc stamp>");
  app.add_flag("--overwrite", f.overwrite, "reuse a non-empty --result-dir");
  app.add_option("--num-warmups", f.num_warmups,
                 "warm-up requests, excluded from statistics (default: one batch)");
  app.add_option("--dataset-name", f.dataset_name,
                 "random, random-mm (random prompts with random images) or jsonl")
      ->capture_default_str();
  app.add_option("--dataset-path", f.dataset_path,
                 "jsonl: lines {\"prompt\": ..} or {\"prompt_token_ids\": [..]}, "
                 "optional \"output_len\", \"image\": FILE or \"images\": [FILE, ..]");
  app.add_option("--random-mm-base-items-per-request", f.random_mm_base_items_per_request,
                 "random-mm: images per request")
      ->capture_default_str();
  app.add_option("--random-mm-num-mm-items-range-ratio", f.random_mm_num_mm_items_range_ratio,
                 "random-mm: image counts uniform in base * (1 -+ ratio), ratio in [0, 1]")
      ->capture_default_str();
  app.add_option("--random-mm-limit-mm-per-prompt", f.random_mm_limit_mm_per_prompt,
                 "random-mm: the most images a request holds, '{\"image\": N}' or image=N")
      ->capture_default_str();
  app.add_option("--random-mm-bucket-config", f.random_mm_bucket_config,
                 "random-mm: image sizes and their probabilities, "
                 "'{(height, width, 1): p, ...}' as vLLM writes it")
      ->capture_default_str();
  app.add_flag("--disable-tqdm", f.disable_tqdm, "no live progress line on stderr");
  app.add_option("--batch-size", f.batch_size, "static load mode: requests per batch")
      ->capture_default_str();
  app.add_option("--input-len", f.input_len, "prompt tokens")->capture_default_str();
  app.add_option("--output-len", f.output_len, "output tokens")->capture_default_str();
  app.add_option("--input-len-dist", f.input_len_dist,
                 "normal:mean=M,std=S,min=A,max=B or uniform:min=A,max=B");
  app.add_option("--output-len-dist", f.output_len_dist, "as --input-len-dist");
  app.add_option("--dtype", f.dtype, "auto (fp32 on cpu, bf16 on cuda), fp32, bf16, fp16")
      ->capture_default_str();
  app.add_option("--device", f.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--runs", f.runs, "repetitions; the median is reported")->capture_default_str();
  app.add_option("--load-mode", f.load_mode,
                 "auto, static, closed or open (auto: open with --request-rate, closed with "
                 "--max-concurrency, else static)")
      ->capture_default_str();
  app.add_option("--memory-sample-interval", f.memory_sample_interval_ms,
                 "telemetry sampling period, ms (1 to 60000)")
      ->capture_default_str();
  app.add_flag("--disable-telemetry", f.disable_telemetry,
               "no memory/energy sampling, step markers or allocation trace (overhead A/B)");
  app.add_option("--cv-threshold", f.cv_threshold,
                 "flag metrics whose coefficient of variation across runs exceeds this (5% or "
                 "0.05)")
      ->capture_default_str();
  add_engine_flags(app, f);
  add_calibration_flags(app, f);
  add_trace_flags(app, f);
  app.add_option("--batching", f.batching, "engine scheduler: continuous or static")
      ->capture_default_str();
  app.add_flag("--no-cuda-graphs,--enforce-eager", f.no_cuda_graphs,
               "CUDA: run decode steps op by op instead of replaying captured graphs");
  app.add_option("--max-graph-batch", f.max_graph_batch,
                 "CUDA: largest decode batch captured in a graph (buckets 1, 2, 4, 8, 16, ...)")
      ->capture_default_str();
  app.add_option("--max-graph-context", f.max_graph_context,
                 "CUDA: decode steps with a longer context run op by op")
      ->capture_default_str();
  app.add_option("--memory-limit", f.memory_limit,
                 "cap on the engine's tracked allocations (e.g. 24GiB): emulates a smaller card; "
                 "beyond it allocations are refused");
  app.add_option("--kv-cache-growth", f.kv_cache_growth,
                 "preallocated (the pool is sized at startup) or on-demand (it grows in chunks; a "
                 "refused growth ends the run marked out of memory)")
      ->capture_default_str();
  app.add_option("--temperature", f.temperature, "0 = greedy")->capture_default_str();
  app.add_option("--top-p", f.top_p, "nucleus sampling mass")->capture_default_str();
  app.add_option("--top-k", f.top_k, "0 = off")->capture_default_str();
  app.add_flag("--no-ignore-eos", f.no_ignore_eos,
               "stop at EOS instead of generating exactly "
               "--output-len tokens");
  app.add_option("--base-url", f.base_url, "openai backends: http(s)://host[:port][/prefix]")
      ->capture_default_str();
  app.add_option("--endpoint", f.endpoint,
                 "openai backends: path after --base-url (default /v1/completions, or "
                 "/v1/chat/completions for openai-chat)");
  app.add_option("--api-key-env", f.api_key_env,
                 "openai backends: environment variable holding the API key (sent as Bearer)");
  app.add_option("--dialect", f.dialect,
                 "openai backends: auto, vllm, sglang, tgi, llamacpp, ollama, openai, inferbench "
                 "(which extension fields are sent; auto: vllm on loopback/private hosts, else "
                 "openai)")
      ->capture_default_str();
  app.add_option("--extra-body", f.extra_body,
                 "openai backends: JSON object merged into every request body");
  app.add_option("--request-timeout", f.request_timeout_s,
                 "openai backends: seconds before a request fails (no retries)")
      ->capture_default_str();
  app.add_flag("--insecure", f.insecure, "openai backends: do not verify TLS certificates");
  app.add_option("--num-clients", f.num_clients,
                 "openai backends: split the run over N client processes (each measures its own "
                 "latencies and overhead; --max-concurrency and --request-rate are divided so "
                 "the totals are what is asked; per-request records are merged)")
      ->capture_default_str();
  app.add_option("--client-launcher", f.client_launcher,
                 "how --num-clients starts its clients: local (processes on this host) or slurm "
                 "(Slurm tasks of one `srun --ntasks N` step, in the current allocation or a new "
                 "one; the result directory must be on a path every node shares)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "slurm"}));
  app.add_option("--slurm-partition", f.slurm_partition,
                 "--client-launcher slurm: srun --partition of the clients' step");
  app.add_option("--slurm-arg", f.slurm_args,
                 "--client-launcher slurm: an extra srun option, e.g. --slurm-arg=--nodes=2 "
                 "(repeatable)");
  // What the parent of a --num-clients run gives each client (listed, for `run --help` to be
  // complete; not for users).
  app.add_option("--client-slice", f.client_slice,
                 "internal to --num-clients: this client's share I/N of the workload");
  app.add_option("--clock-origin-ns", f.clock_origin_ns,
                 "internal to --num-clients: the benchmark's time zero on the monotonic clock");
  app.add_option("--clock-origin-unix-ns", f.clock_origin_unix_ns,
                 "internal to --client-launcher slurm: the benchmark's time zero on the wall "
                 "clock (clients on other hosts)");
  app.add_option("--client-sync-dir", f.client_sync_dir,
                 "internal to --num-clients: where the clients meet to start each run together");
  app.add_option("--lora-assignment", f.lora_assignment,
                 "which --lora-modules adapter each request asks for: random (vLLM bench's "
                 "uniform choice per request), round-robin, or zipf:S (adapter k with "
                 "probability ~ 1/k^S)")
      ->capture_default_str();
}

}  // namespace ib
