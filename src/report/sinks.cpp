// The four report sinks: result.json, requests.jsonl, summary.csv, Markdown on stdout.
#include <fstream>

#include <fmt/format.h>

#include "core/fs.h"
#include "report/report.h"

namespace ib {
namespace {

class JsonSink : public ReportSink {
 public:
  std::string name() const override { return "json"; }
  Status begin(const SinkContext& c) override {
    dir_ = c.result_dir;
    return Ok{};
  }
  Status finish(const BenchmarkReport& r) override {
    return write_file_atomic(dir_ / kResultJson, result_json(r).dump(2) + "\n");
  }

 private:
  std::filesystem::path dir_;
};

class JsonlSink : public ReportSink {
 public:
  std::string name() const override { return "jsonl"; }
  Status begin(const SinkContext& c) override {
    path_ = c.result_dir / kRequestsJsonl;
    origin_ns_ = c.origin_ns;
    out_.open(path_, std::ios::out | std::ios::trunc);
    if (!out_) return runtime_error(fmt::format("cannot write {}", path_.string()));
    return Ok{};
  }
  Status on_record(const RequestRecord& rec) override {
    out_ << request_json_line(rec, origin_ns_) << '\n';
    out_.flush();  // a crash or Ctrl-C keeps every finished request
    if (!out_) return runtime_error(fmt::format("writing {} failed (disk full?)", path_.string()));
    return Ok{};
  }
  Status finish(const BenchmarkReport&) override {
    out_.close();
    if (out_.fail()) return runtime_error(fmt::format("closing {} failed", path_.string()));
    return Ok{};
  }

 private:
  std::filesystem::path path_;
  int64_t origin_ns_ = 0;
  std::ofstream out_;
};

class CsvSink : public ReportSink {
 public:
  std::string name() const override { return "csv"; }
  Status begin(const SinkContext& c) override {
    dir_ = c.result_dir;
    return Ok{};
  }
  Status finish(const BenchmarkReport& r) override {
    return write_file_atomic(dir_ / kSummaryCsv, summary_csv(r));
  }

 private:
  std::filesystem::path dir_;
};

class MarkdownSink : public ReportSink {
 public:
  std::string name() const override { return "markdown"; }
  Status begin(const SinkContext& c) override {
    out_ = c.out;
    return Ok{};
  }
  Status finish(const BenchmarkReport& r) override {
    if (out_ != nullptr) *out_ << markdown_summary(r) << std::flush;
    return Ok{};
  }

 private:
  std::ostream* out_ = nullptr;
};

}  // namespace

std::unique_ptr<ReportSink> make_json_sink() {
  return std::make_unique<JsonSink>();
}
std::unique_ptr<ReportSink> make_jsonl_sink() {
  return std::make_unique<JsonlSink>();
}
std::unique_ptr<ReportSink> make_csv_sink() {
  return std::make_unique<CsvSink>();
}
std::unique_ptr<ReportSink> make_markdown_sink() {
  return std::make_unique<MarkdownSink>();
}

}  // namespace ib
