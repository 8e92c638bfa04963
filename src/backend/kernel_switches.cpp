// The kernel switches' list, their checks and their JSON record (kernel_switches.h).
#include "backend/kernel_switches.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

extern char** environ;  // NOLINT: POSIX; the one way to list the environment

namespace ib {
namespace {

// The one list. bench/NOTES.md has each switch's measurement; the CUDA backend's setters
// (cuda/detail/cuda_backend_impl.h) say what each selects.
constexpr KernelSwitchSpec kSpecs[] = {
    {"IB_CUDA_DEBUG_SYNC", "cuda", "0", 0, 1, "",
     "1: wait for every op, so an asynchronous fault names the op"},
    {"IB_PDL", "cuda", "3", 0, 3, "",
     "0: no programmatic dependent launch; 1: every decode kernel lets the next launch as it "
     "starts; 2: the same, except the attention's successor, launched at its end; 3: as 2, but "
     "with W8A8 weights (fp8, int8-w8a8: the attention's successor is the one-block activation "
     "quantize kernel) the attention lets it launch as it starts (measured on an H100 against 2: "
     "fp8 batch 1 +0.5 %, int8-w8a8 +0.2 %)"},
    {"IB_FUSED", "cuda", "1", 0, 1, "",
     "0: the decode step without the fused norm/SwiGLU/residual GEMVs"},
    {"IB_ADD_CUBLASLT", "cuda", "0", 0, 1, "",
     "1: matmul_add of 2-8 rows on cuBLASLt (beta = 1) for weights above the GEMV's size rule"},
    {"IB_MATMUL_TUNING", "cuda", "1", 0, 0, "0|1|2|3|gemv",
     "0: the static GEMV/cuBLASLt rule; gemv: the GEMV for every matmul of <= 8 rows; 1: tuning, "
     "except that a single row takes the GEMV wherever the static rule does (its timing alone "
     "cannot see the GEMV overlap its neighbours under programmatic dependent launch; measured on "
     "the H200: DeepSeek-V2-Lite +3.2 %, Mixtral-8x7B +1.6 % at batch 1); 2: tuning at every row "
     "count; 3: as 1 for every row count up to 8"},
    {"IB_GEMM_M_BUCKETS", "cuda", "4", 0, 0, "0|1|2|4|8|16",
     "cuBLASLt plans above 16 rows per row bucket (this many an octave; the heuristic's algorithm "
     "at the bucket's top, each shape's buckets launched once on its first call so their kernel "
     "modules load then) instead of one per row count, whose new kernels load mid-run (measured on "
     "an H100 at 4: Llama-3-8B bf16 continuous +0.1-0.6 %); 0: a plan per row count"},
    {"IB_GEMM_TUNE", "cuda", "1", 0, 1, "",
     "1: each cuBLASLt row bucket's algorithm the fastest of the heuristic's first 8, timed at the "
     "bucket's own M when its shape's buckets are prewarmed (on scratch operands of up to 1 GiB, "
     "freed after; ~6 s more start-up for Llama-3-8B; measured on an H100: Llama-3-8B bf16 "
     "continuous +0.7-0.8 %); 0: the heuristic's first"},
    {"IB_ATTN_PREFETCH", "cuda", "8", 0, 1 << 20, "",
     "the split-KV attention prefetches its K and V rows into L2 in steps of at most this many "
     "sequences (0: never)"},
    {"IB_ATTN_LEAN", "cuda", "1", 0, 2, "",
     "1: the split-KV decode attention's few-block form (bf16/fp16 caches, head_dim 64 or 128, "
     "up to 4 query heads a KV head) with fewer dependent memory round trips (block tables read "
     "before the PDL wait, a chunk's keys and its values as 16-byte vectors in one round trip), "
     "8 warps a block where the blocks fit one an SM, else 4 (measured on the H200: Llama-3-8B "
     "+1.0 % at batch 1, +0.6-1.1 % on the seed protocol, the attention 9.5 -> 7.3 us a layer at "
     "batch 8; Mixtral-8x7B even); 2: the same with 4 warps (measured even); 0: values loaded 8 "
     "keys at a time"},
    {"IB_ATTN_MMA", "cuda", "128", 0, 1 << 20, "",
     "decode steps of at least this many sequences run the tensor-core decode attention (a "
     "block per sequence and KV head, the GQA group's query heads as the MMA's rows, 64-key "
     "tiles by cp.async; bf16/fp16 or E4M3 caches, head_dim 64-128, groups up to 16, no "
     "block-sparse pattern). Alone, on an H100 (bench/results/h100/attn-mma/run2): 20 % faster "
     "than the "
     "split-KV kernel at 256 and 1,024 sequences of 256 tokens, equal at 64 x 1,024, and up to "
     "12x slower for one long sequence (no split of the context), hence 128; Llama-3-8B "
     "continuous +4 % in bf16, +5 % in fp8 (bench/results/h100/defaults/run1); 0: never"},
    {"IB_ATTN_MIXED", "cuda", "16", 0, 1 << 20, "",
     "a batch mixing prefill chunks and decode tokens (continuous batching with chunked "
     "prefill) runs its leading one-token sequences, when at least this many, on the decode "
     "attention (IB_ATTN_MMA's choice) and the rest on the flash kernel, which gives every "
     "sequence a block of 64 query rows per query head. On an H100 "
     "(bench/results/h100/attn-mixed/run1): Llama-3-8B continuous 1,024 x 128/128 +3.4-4.4 % in "
     "bf16, +5.8 % in fp8; 1,024-token prompts at 30 requests/s +24 % (TTFT 769 -> 244 ms, TPOT "
     "97.7 -> 70.1 ms); 0: the whole batch on the flash kernel"},
    {"IB_ATTN_MMA_PERSIST", "cuda", "0", 0, 16, "",
     "N: the tensor-core decode attention launches N blocks an SM (3 fit at head_dim 128), each "
     "taking (sequence, KV head) items in turn as one stream of tiles, so an item's first loads "
     "and Q arrive during the previous item's last tile and merge (on an H100, "
     "bench/results/h100/attn-e4m3/run3 and run4: bf16 continuous +0.3 %, alone faster at 64 "
     "keys, slower from 256); 0: a block per item (each pays its first load's round trip and its "
     "merge in turn)"},
    {"IB_ATTN_E4M3_F16", "cuda", "1", 0, 1, "",
     "1: a bf16 model's tensor-core decode attention over an E4M3 cache converts the cache to "
     "fp16 (one paired conversion for two values, against bf16's four instructions) and runs its "
     "MMAs in fp16, Q clamped to fp16's range, P in fp16, f32 accumulation (on an H100, "
     "bench/results/h100/attn-e4m3/run3: 3-10 % faster alone, fp8 continuous 22,064 / 22,129 "
     "-> 22,313 / 22,421); 0: the cache converted to bf16, the MMAs in bf16"},
    {"IB_CUDA_MLA", "cuda", "1", 0, 1, "",
     "1: the CUDA backend offers its multi-head latent attention kernels (DeepSeek-V2) to the "
     "engine (tested against the CPU ops and transformers on the H200); 0: a DeepSeek-V2 model "
     "is refused on CUDA"},
    {"IB_MLA_SPLIT", "cuda", "1", 0, 1, "",
     "1: the latent attention as three kernels split across blocks (q_lat, the context in "
     "splits, the splits combined and projected; measured faster on the H200); 0: a block per "
     "token and head"},
    {"IB_MOE_WIDE", "cuda", "1", 0, 1 << 20, "",
     "the experts' matmuls of chunks of at most this many tokens (taken before IB_MOE_TILES) in "
     "tiles of 16 weight rows and one pair a pass: twice the bytes in flight per pass where each "
     "expert has one pair, as in single-token steps (measured on the H200: DeepSeek-V2-Lite "
     "+3.8 % at batch 1, Mixtral-8x7B within noise)"},
    {"IB_MOE_TILES", "cuda", "2", 0, 1 << 20, "",
     "the experts' matmuls of chunks of at most this many tokens in tiles (a block per tile of 8 "
     "weight rows, K split across its warps, the same blocks for every expert slot; measured "
     "fastest on the H200 at 1 and 2 tokens, slower at 4 and 8)"},
    {"IB_MOE_BALANCE", "cuda", "8", 0, 1 << 20, "",
     "larger chunks of at most this many tokens in the same tiles with their work items (tile, "
     "expert) spread evenly over a grid of the device's resident blocks, each block sorting the "
     "pairs by expert once (measured fastest on the H200 at 4 and 8 tokens, slower at 1 and 2); "
     "larger chunks, and all with both 0, a warp per weight row over all of K"},
    {"IB_MOE_WARPS", "cuda", "8", 0, 1 << 20, "",
     "chunks of at most this many tokens (after IB_MOE_WIDE's, before IB_MOE_TILES and "
     "IB_MOE_BALANCE) in the balanced grid with each work item (tile, expert) a warp's, K split "
     "across its lanes and the sums met by shuffles, no block barrier an item (measured on the "
     "H200 against 0: DeepSeek-V2-Lite's seed protocol +14.7 %; at batch 1 with IB_MOE_WIDE=0 "
     "it tied the wide tiles; on H100s it tied); 0: never"},
    {"IB_MOE_WARP_RING", "cuda", "0", 0, 1, "",
     "the warp form's operands through a ring of 2 slots a warp in shared memory (each a step's "
     "4 KB of weights and its pairs' x) by cp.async, refilled as each is read (chunks of at most 8 "
     "tokens; measured slower on DeepSeek-V2-Lite's seed protocol: on the H200 996.6 tok/s "
     "against the register form's 1,217.9, on H100s 3-7.5 % under the balanced blocks)"},
    {"IB_MOE_GEMM", "cuda", "32", 0, 1 << 20, "",
     "calls of at least this many tokens (prefill, large decode batches; past the tile forms' "
     "sizes) run the experts' matmuls as a grouped tensor-core GEMM: a plan kernel sorts the "
     "pairs by expert into tiles of 64 rows, then m16n8k16 MMAs against each tile's expert, "
     "graph-safe (DeepSeek-V2-Lite on an H100 against 0: seed protocol +4.9 %, its TTFT 84 -> "
     "27 ms, continuous 1,421 -> 4,011 output tok/s; transformers parity kept: "
     "bench/results/h100/moe-gemm/run1); 0: a warp per weight row over all of K"},
    {"IB_QUANT_GEMM", "cuda", "64", 0, 1 << 20, "",
     "weight-only quantized matmuls (W4A16 as AWQ / GPTQ, NF4, INT8 W8A16) of at most this many "
     "rows that the decode GEMV does not take (prefill, large decode batches) run a tensor-core "
     "GEMM that turns each stage's codes into bf16/fp16 in shared memory, K split across blocks "
     "where the tiles do not fill the GPU. On an H100 (bench/results/h100/quant-gemm/run2) it "
     "beats the other path at 17-64 rows (Llama-3-8B's linears 281-312 us a layer against "
     "376-380) and loses from 80 (its second 64-row tile), hence 64: 64 requests at a time, "
     "awq +18 %, int8 +44 %; larger matmuls, and all with 0, dequantize the weight into a "
     "scratch for cuBLASLt"},
    {"IB_MOE_SHARED", "cuda", "0", 0, 1, "",
     "1: DeepSeek-V2's shared experts run inside the expert kernels, as always-on experts of "
     "the routed ones' width (one launch for routed and shared; weights rearranged at load; "
     "measured on the H200: +1.3 % at batch 1, -18 % at batch 8); 0: a dense MLP beside the "
     "routed experts (gate/up GEMV, SwiGLU, down GEMV, add)"},
    {"IB_MOE_PDL", "cuda", "1", 0, 1, "",
     "1: the MoE kernels (router, experts, combine) launched with programmatic dependent launch "
     "where IB_PDL is on, each waiting for the kernels before it first (measured on the H200: "
     "DeepSeek-V2-Lite +3.4 % at batch 1, +0.8 % at batch 8, Mixtral-8x7B +1.1 %); 0: launched "
     "plainly"},
    {"IB_MOE_INT4_RING", "cuda", "0", 0, 1, "",
     "1: the 4-bit (AWQ / GPTQ) experts' steps of chunks of at most 8 tokens stream through a "
     "ring of 4 steps a warp in shared memory (cp.async) across the block's tiles, as the W4A16 "
     "GEMV's ring (measured on the H200: Mixtral-8x22B AWQ -13 % at batch 1 and on the seed "
     "protocol); 0: 4 steps a warp loaded into registers, then multiplied"},
    {"IB_MOE_ADD_NORM", "cuda", "0", 0, 2, "",
     "1: Mixtral's layers end in one kernel for the experts' combine, the residual add and the "
     "next layer's input RMSNorm (the two kernels' arithmetic in their order), and its bf16/fp16 "
     "decode steps run "
     "the fused decode ops (RMSNorm + q/k/v + RoPE/cache, o + residual add; the attention norm's "
     "gain folded into q/k/v) (measured on the H200: Mixtral-8x7B -0.6 % and -0.7 % at batch 1 in "
     "two calls); 2: the same fused decode ops with the experts' own combine (blocks across the "
     "features) and then the add + norm kernel (measured even); 0: the unfused ops"},
    {"IB_GEMV_PERSIST", "cuda", "0", 0, 32, "",
     "the quantized formats' decode GEMVs run a persistent grid of this many blocks per SM, "
     "prefetching each block's next row tile (0: one block per tile)"},
    {"IB_GEMV_RING", "cuda", "1", 0, 1, "",
     "1: the quantized formats' decode GEMVs of 1-4 and 9-16 tokens stream their weights through "
     "a ring of 4 steps per warp in shared memory (cp.async), the others through registers; 0: "
     "all through registers, 2-4 steps in flight"},
    {"IB_GEMV_FUSE_QUANT", "cuda", "0", 0, 1, "",
     "1: the FP8 and INT8 W8A8 decode GEMVs of one token quantize x in each block (its codes in "
     "shared memory) instead of after a quantize kernel (measured slower on an H100: fp8 batch 1 "
     "-4 %); 0: a quantize kernel before each GEMV"},
    {"IB_QUANT_TRIGGER", "cuda", "0", 0, 2, "",
     "where the W8A8 activation quantize kernel lets the next kernel launch (PDL): 0 right after "
     "its wait, 1 once its row is loaded and reduced, 2 at its exit (measured on an H100: fp8 "
     "batch 1 -1.7 % at 1, -3.8 % at 2)"},
    {"IB_QUANT_SYNC", "cuda", "0", 0, 2, "",
     "1: the quantized decode GEMVs wait for the quantize (W8A8) or norm (W8A16, 4-bit) kernel "
     "before them by a flag its blocks count into once their outputs are stored, instead of for "
     "its grid's end; 2: the same, that kernel letting the GEMV launch before its own wait (the "
     "GEMV's blocks resident and streaming their first weights while the kernel before it "
     "runs; measured on an H100 at batch 1: fp8 -6.0 / -6.5 %, awq -6.7 / -5.2 % at 1 / 2); 0: "
     "no"},
    {"IB_GEMV_STAGE_X", "cuda", "1", 0, 2, "",
     "the decode GEMVs of one token that copy x into each block's shared memory and read every "
     "step's x there: 1 INT8 W8A16's (measured +8 % at batch 1 on an H100), 2 every quantized "
     "format's (W8A8 the quantize kernel's codes; fp8 -6 %, awq even, nf4 -4 %), 0 none"},
    {"IB_GEMV_STAGE_NORM", "cuda", "1", 0, 1, "",
     "1: the INT8 W8A16 and 4-bit decode GEMVs of one token whose x IB_GEMV_STAGE_X copies in "
     "normalise it there (the RMSNorm kernel's arithmetic in its order) instead of after a norm "
     "kernel (measured on an H100 at batch 1: int8 +1.7 %; awq and nf4 staged and normalised "
     "-3.6 % and -2.7 % against unstaged); 0: a norm kernel before each normalised GEMV"},
    {"IB_GEMV_DENSE_RING", "cuda", "0", 0, 1, "",
     "1: the dense decode GEMVs of 1-8 tokens stream their weights through a ring of 4 steps per "
     "warp in shared memory (cp.async, 64 KB a block; measured 2x slower on the H200); 0: "
     "through registers"},
    {"IB_GEMV_INT4_WARPS", "cuda", "0", 0, 0, "0|8|4|2",
     "the W4A16 decode GEMVs of 1-4 tokens through the ring: warps per block splitting K (fewer "
     "warps stream more steps each); 0: 4 for launches of at least 1,024 row tiles (gate/up), "
     "else 8, measured fastest on the H200"},
    {"IB_NORM_REGS", "cuda", "1", 0, 1, "",
     "1: RMSNorm rows of up to 8,192 bf16 values with x held in registers (read once) and the "
     "gain loaded before the PDL wait (measured faster on the H200); 0: the two-pass kernel"},
    {"IB_ROPE_VEC", "cuda", "1", 0, 1, "",
     "1: RoPE and the KV-cache write of prefill and batched decode steps (rope_and_cache) by "
     "16-byte vectors of pairs, a thread each (the same values; measured on an H100: the kernel "
     "28.5 -> 10.0 us a call over a continuous run, Llama-3-8B bf16 continuous +1.2-2.2 %); 0: a "
     "thread per pair"},
    {"IB_NORM_POST", "cuda", "1", 0, 1, "",
     "1: Gemma-2's post-norm, residual add and the next pre-norm in one RMSNorm kernel of the "
     "register form (the two kernels' arithmetic in their order; measured on the H200: "
     "Gemma-2-9B +1.9 % at batch 1); 0: two kernels"},
    {"IB_GGUF_WIDE", "cuda", "0", 0, 1, "",
     "1: the GGUF decode GEMVs of fewer than 8,192 row pairs split K across 4 warps per row pair; "
     "0: a warp per row pair (measured faster on the H200)"},
    {"IB_GEMV_SWIGLU_BLOCKS", "cuda", "3", 0, 0, "0|3",
     "3: the dense gate/up GEMV's registers capped so that 3 blocks fit on an SM; 0: the "
     "compiler's choice (2)"},
    {"IB_SMEM_CARVEOUT", "cuda", "-1", -1, 100, "",
     "the shared-memory carve-out preference (percent of the SM's shared memory) set on every "
     "kernel the backend launches, so that neighbouring kernels need no change of an SM's L1 / "
     "shared split (a hint; written to test why IB_GEMV_DENSE_RING's 68 KB blocks halved bf16 "
     "decode; not yet measured); -1: none, the driver's choice"},
    {"IB_GEMV_QKV_BLOCKS", "cuda", "2", 0, 1 << 20, "",
     "the dense q/k/v GEMV (RMSNorm + q/k/v + RoPE/cache) of launches of at least this many "
     "tokens with its registers capped so that 3 blocks fit on an SM, its row tiles in one wave "
     "(measured on the H200 from 2 tokens: Llama-3-8B bf16 seed protocol +2.0 %, batch 1 even); "
     "0: never (the compiler's 2 blocks)"},
    {"IB_LORA_FUSED", "cuda", "0", 0, 1, "",
     "1: each LoRA update's shrink and expand in one launch (the expand's blocks wait in the "
     "kernel for the shrink's) instead of two"},
    {"IB_LORA_PDL", "cuda", "1", 0, 1, "",
     "1: the LoRA shrink and expand take part in programmatic dependent launch where IB_PDL is "
     "on (the shrink prefetches its A rows before it waits); 0: launched plainly"},
    {"IB_LORA_IN_GEMV", "cuda", "5", 0, 0, "0|1|3|4|5",
     "decode steps with LoRA adapters on the fused decode GEMVs, each update's expand in the "
     "GEMV's epilogue and its shrink in a launch before it (1) or accumulated by the GEMV before "
     "it from the outputs it stores (3: chained, one shrink launch a layer; measured slower "
     "since 2 was removed); 4: as 1, each dense GEMV waiting for its shrink by flags (it "
     "launches and streams its weights while the shrink waits for x; the same results as 1; "
     "measured 2.9 % slower than 1 on an H100); 5: as 1, but o's and down's shrink launches "
     "also compute the next gate/up's and q/k/v's shrinks from lookahead matrices made when an "
     "adapter is loaded (two shrink launches a layer instead of four; the default, 2.4-2.6 % "
     "faster than 1 on an H100 with one rank-16 adapter); "
     "0: on the unfused ops, a shrink and an expand launch after each projection's matmul"},
    {"IB_LORA_QKV_BLOCKS", "cuda", "1", 0, 1, "",
     "1: the LoRA variant of the dense q/k/v GEMV with its registers capped for 3 blocks an SM "
     "where IB_GEMV_QKV_BLOCKS gives the base variant that cap (its row tiles in one wave; the "
     "default: one rank-16 adapter's overhead 11.8 % against 12.9 % at 0 on an H100); 0: 2 "
     "blocks"},
    {"IB_LORA_ATTN", "cuda", "0", 0, 1, "",
     "1 (with IB_LORA_IN_GEMV=5): o's lookahead shrink (its own and gate/up's) computed by the "
     "decode attention's finishing blocks where the lean split-KV form runs, instead of a launch "
     "between the attention and o's GEMV (measured 1.7 % slower on an H100: the attention's "
     "advance grew 8 us, more than the launch's 7.4)"},
};

Status check_value(const KernelSwitchSpec& spec, std::string_view text) {
  const std::string shown = std::string(spec.name) + "='" + std::string(text) + "' is not valid: ";
  if (!spec.words.empty()) {
    std::string_view rest = spec.words;
    std::string listed;
    while (!rest.empty()) {
      const size_t bar = rest.find('|');
      const std::string_view word = rest.substr(0, bar);
      if (word == text) return Ok{};
      listed += (listed.empty() ? "" : (bar == std::string_view::npos ? " or " : ", ")) +
                std::string(word);
      rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
    }
    return user_error(shown + "use " + listed + ", or unset it");
  }
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || x < spec.min ||
      x > spec.max) {
    return user_error(shown + "use an integer from " + std::to_string(spec.min) + " to " +
                      std::to_string(spec.max) + ", or unset it");
  }
  return Ok{};
}

}  // namespace

std::span<const KernelSwitchSpec> kernel_switch_specs() {
  return kSpecs;
}

const KernelSwitchSpec* find_kernel_switch(std::string_view name) {
  for (const auto& spec : kSpecs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

Result<std::map<std::string, std::string>> read_kernel_switch_env(std::string_view backend) {
  std::map<std::string, std::string> out;
  for (const auto& spec : kSpecs) {
    if (spec.backend != backend) continue;
    const char* value = std::getenv(std::string(spec.name).c_str());
    if (value == nullptr) continue;
    IB_TRY(check_value(spec, value));
    out.emplace(spec.name, value);
  }
  return out;
}

KernelSwitches unapplied_kernel_switches() {
  KernelSwitches out;
  for (const auto& spec : kSpecs) {
    const char* value = std::getenv(std::string(spec.name).c_str());
    if (value != nullptr) out.emplace(spec.name, KernelSwitchSetting{value, true, false});
  }
  return out;
}

void check_kernel_switch_report(const KernelSwitches& switches, std::string_view backend) {
  for (const auto& [name, setting] : switches) {
    const KernelSwitchSpec* spec = find_kernel_switch(name);
    IB_ASSERT(spec != nullptr, "a backend reported a kernel switch that is not in the list");
    IB_ASSERT(!setting.applies || spec->backend == backend,
              "a backend reported another backend's kernel switch as applying");
  }
  for (const auto& spec : kSpecs) {
    IB_ASSERT(spec.backend != backend || switches.count(std::string(spec.name)) == 1,
              "a backend left one of its kernel switches out of its report");
  }
}

std::vector<std::string> unknown_ib_variables() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (name.starts_with("IB_") && find_kernel_switch(name) == nullptr) out.emplace_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json kernel_switches_json(const KernelSwitches& switches) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, s] : switches) {
    out[name] = {
        {"value", s.value}, {"source", s.from_env ? "env" : "default"}, {"applies", s.applies}};
  }
  return out;
}

}  // namespace ib
