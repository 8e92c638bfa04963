// libib_kernel_profile.so: a CUPTI kernel tracer to LD_PRELOAD into any CUDA process (the machine
// has CUPTI but no Nsight Systems). It records every kernel, graph-launched ones included, and
// at exit writes per-kernel totals to $IB_KERNEL_PROFILE (default: stderr): calls, total and
// mean microseconds, share of GPU busy time; and the busy time against the span from the first
// kernel's start to the last one's end (the rest: gaps between kernels).
// Optional $IB_KERNEL_PROFILE_FROM_NS skips kernels that start before that many ns after the
// first one (load, warm-up). Under programmatic dependent launch kernels overlap, so a kernel's
// own time says little; each row also gives its "advance": how far the kernel moves the end of
// all GPU work started before it (end minus the later of its start and that frontier, or 0), and
// the idle gap before it (its start minus the frontier, or 0). Advances plus gaps sum to the span.
// Optional $IB_KERNEL_TIMELINE=path also writes the last $IB_KERNEL_TIMELINE_COUNT (2,000)
// kernels as CSV: start and end in ns from the first counted kernel, advance, gap, name.
//
//   IB_KERNEL_PROFILE=prof.txt LD_PRELOAD=build/bench/gpu/libib_kernel_profile.so inferbench run
//   ...
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

double ms(uint64_t ns) {
  return static_cast<double>(ns) * 1e-6;
}

constexpr size_t kBufferBytes = size_t{8} << 20;

struct KernelSpan {
  uint64_t start_ns, end_ns;
  std::string name;
};

std::mutex g_mutex;
std::vector<KernelSpan>* g_spans = nullptr;  // leaked: alive until the last flush at exit

std::string demangle(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  return s;
}

// The kernel name without its template arguments and parameter list.
std::string short_name(const char* mangled) {
  std::string s = demangle(mangled);
  if (const size_t paren = s.find('('); paren != std::string::npos) s.resize(paren);
  std::string out;
  int depth = 0;
  for (const char c : s) {
    if (c == '<') ++depth;
    if (depth == 0) out += c;
    if (c == '>') --depth;
  }
  if (const size_t space = out.rfind(' '); space != std::string::npos) out = out.substr(space + 1);
  return out;
}

// The template arguments too, for the kernels whose configuration matters.
std::string full_name(const char* mangled) {
  std::string s = demangle(mangled);
  if (const size_t paren = s.rfind('('); paren != std::string::npos) s.resize(paren);
  if (const size_t space = s.find(' '); space != std::string::npos && space < s.find('<'))
    s = s.substr(space + 1);
  return s.size() > 110 ? short_name(mangled) : s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    g_spans->push_back({k->start, k->end, full_name(k->name)});
  }
  std::free(buffer);
}

void report() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<KernelSpan>& spans = *g_spans;
  const char* path = std::getenv("IB_KERNEL_PROFILE");
  FILE* out = path != nullptr ? std::fopen(path, "w") : stderr;
  if (out == nullptr) out = stderr;
  if (spans.empty()) {
    std::fprintf(out, "kernel profile: no kernels recorded\n");
    if (out != stderr) std::fclose(out);
    return;
  }
  std::sort(spans.begin(), spans.end(),
            [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  uint64_t from = spans.front().start_ns;
  if (const char* skip = std::getenv("IB_KERNEL_PROFILE_FROM_NS"))
    from += std::strtoull(skip, nullptr, 10);
  struct Total {
    uint64_t calls = 0, ns = 0, advance_ns = 0, gap_ns = 0;
  };
  std::map<std::string, Total> totals;
  uint64_t busy = 0, first = UINT64_MAX, last = 0, covered_to = 0;
  struct Step {
    const KernelSpan* span;
    uint64_t advance_ns, gap_ns;
  };
  std::vector<Step> steps;
  for (const KernelSpan& s : spans) {
    if (s.start_ns < from) continue;
    Total& t = totals[s.name];
    ++t.calls;
    t.ns += s.end_ns - s.start_ns;
    first = std::min(first, s.start_ns);
    last = std::max(last, s.end_ns);
    // Busy time: the union of the kernels' intervals; each kernel's advance of it and the gap
    // before it (none before the first counted kernel).
    const uint64_t frontier = covered_to == 0 ? s.start_ns : covered_to;
    const uint64_t begin = std::max(s.start_ns, frontier);
    const uint64_t advance = s.end_ns > begin ? s.end_ns - begin : 0;
    const uint64_t gap = s.start_ns > frontier ? s.start_ns - frontier : 0;
    busy += advance;
    t.advance_ns += advance;
    t.gap_ns += gap;
    steps.push_back({&s, advance, gap});
    covered_to = std::max(frontier, s.end_ns);
  }
  std::vector<std::pair<std::string, Total>> rows(totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  uint64_t kernel_ns = 0;
  for (const auto& r : rows) kernel_ns += r.second.ns;
  const size_t counted = static_cast<size_t>(std::count_if(
      spans.begin(), spans.end(), [&](const KernelSpan& s) { return s.start_ns >= from; }));
  const uint64_t span = std::max<uint64_t>(1, last - first);
  std::fprintf(out,
               "kernel profile: %zu kernels, span %.3f ms, GPU busy %.3f ms (%.1f %%), "
               "sum of kernel times %.3f ms\n",
               counted, ms(span), ms(busy), 100.0 * ms(busy) / ms(span), ms(kernel_ns));
  std::fprintf(out, "%10s %12s %10s %7s %11s %9s  %s\n", "calls", "total ms", "mean us", "share",
               "advance us", "gap us", "kernel");
  for (const auto& [name, t] : rows) {
    const double calls = static_cast<double>(t.calls);
    std::fprintf(out, "%10llu %12.3f %10.2f %6.1f%% %11.2f %9.2f  %s\n",
                 static_cast<unsigned long long>(t.calls), ms(t.ns), ms(t.ns) * 1e3 / calls,
                 100.0 * ms(t.ns) / ms(kernel_ns), ms(t.advance_ns) * 1e3 / calls,
                 ms(t.gap_ns) * 1e3 / calls, name.c_str());
  }
  if (out != stderr) std::fclose(out);
  if (const char* timeline = std::getenv("IB_KERNEL_TIMELINE")) {
    const char* count_text = std::getenv("IB_KERNEL_TIMELINE_COUNT");
    const size_t count = count_text != nullptr ? std::strtoull(count_text, nullptr, 10) : 2000;
    if (FILE* csv = std::fopen(timeline, "w")) {
      std::fprintf(csv, "start_ns,end_ns,advance_ns,gap_ns,kernel\n");
      for (size_t i = steps.size() > count ? steps.size() - count : 0; i < steps.size(); ++i) {
        const Step& st = steps[i];
        std::fprintf(csv, "%llu,%llu,%llu,%llu,\"%s\"\n",
                     static_cast<unsigned long long>(st.span->start_ns - first),
                     static_cast<unsigned long long>(st.span->end_ns - first),
                     static_cast<unsigned long long>(st.advance_ns),
                     static_cast<unsigned long long>(st.gap_ns), st.span->name.c_str());
      }
      std::fclose(csv);
    }
  }
}

// The report must run while the CUDA context still exists: registered with atexit when the
// first context is created, it runs before the CUDA runtime's own exit handler (registered
// earlier, so run later), which destroys the context.
void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void*) {
  static std::once_flag once;
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_CREATED)
    std::call_once(once, [] { std::atexit(report); });
}

__attribute__((constructor)) void start() {
  g_spans = new std::vector<KernelSpan>();
  g_spans->reserve(size_t{1} << 20);
  CUpti_SubscriberHandle subscriber = nullptr;
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiSubscribe(&subscriber, on_resource, nullptr) != CUPTI_SUCCESS ||
      cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel profile: CUPTI could not be enabled\n");
    return;
  }
  cuptiActivityFlushPeriod(500);  // buffers also arrive while the process runs
}

}  // namespace
