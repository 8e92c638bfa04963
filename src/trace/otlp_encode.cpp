// OTLP trace export request in protobuf's wire format (opentelemetry-proto, trace/v1 and
// collector/trace/v1): the few messages a span needs, written field by field.
#include <bit>
#include <string>

#include "trace/trace.h"

namespace ib {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_fixed64(std::string& out, uint32_t field, uint64_t v) {
  put_tag(out, field, kFixed64);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <size_t N>
std::string_view id_bytes(const std::array<uint8_t, N>& id) {
  return {reinterpret_cast<const char*>(id.data()), N};
}

// AnyValue: string_value 1, bool_value 2, int_value 3, double_value 4, array_value 5
// (ArrayValue: repeated AnyValue values 1).
std::string any_value(const SpanAttribute& a) {
  std::string v;
  if (const auto* s = std::get_if<std::string>(&a.value)) {
    put_bytes(v, 1, *s);
  } else if (const auto* b = std::get_if<bool>(&a.value)) {
    put_tag(v, 2, kVarint);
    put_varint(v, *b ? 1 : 0);
  } else if (const auto* i = std::get_if<int64_t>(&a.value)) {
    put_tag(v, 3, kVarint);
    put_varint(v, static_cast<uint64_t>(*i));  // two's complement, ten bytes when negative
  } else if (const auto* d = std::get_if<double>(&a.value)) {
    put_fixed64(v, 4, std::bit_cast<uint64_t>(*d));
  } else if (const auto* list = std::get_if<std::vector<std::string>>(&a.value)) {
    std::string array;
    for (const std::string& element : *list) {
      std::string item;
      put_bytes(item, 1, element);
      put_bytes(array, 1, item);
    }
    put_bytes(v, 5, array);
  }
  return v;
}

// KeyValue: key 1, value 2.
std::string key_value(const SpanAttribute& a) {
  std::string kv;
  put_bytes(kv, 1, a.key);
  put_bytes(kv, 2, any_value(a));
  return kv;
}

// Span: trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6, start 7, end 8 (fixed64 Unix
// ns), attributes 9, status 15 (Status: message 2, code 3; 2 = ERROR), flags 16 (fixed32: the
// W3C flags in bits 0-7, bit 8 "has remote parent is known", bit 9 "parent is remote").
std::string span_message(const Span& s) {
  std::string m;
  put_bytes(m, 1, id_bytes(s.trace_id));
  put_bytes(m, 2, id_bytes(s.span_id));
  if (s.parent_span_id != SpanId{}) put_bytes(m, 4, id_bytes(s.parent_span_id));
  put_bytes(m, 5, s.name);
  put_tag(m, 6, kVarint);
  put_varint(m, static_cast<uint64_t>(s.kind));
  put_fixed64(m, 7, static_cast<uint64_t>(s.start_unix_ns));
  put_fixed64(m, 8, static_cast<uint64_t>(s.end_unix_ns));
  for (const SpanAttribute& a : s.attributes) put_bytes(m, 9, key_value(a));
  if (s.error) {
    std::string status;
    if (!s.status_message.empty()) put_bytes(status, 2, s.status_message);
    put_tag(status, 3, kVarint);
    put_varint(status, 2);
    put_bytes(m, 15, status);
  }
  return m;
}

}  // namespace

// ExportTraceServiceRequest: resource_spans 1. ResourceSpans: resource 1 (Resource: attributes
// 1), scope_spans 2. ScopeSpans: scope 1 (InstrumentationScope: name 1, version 2), spans 2.
std::string encode_otlp_traces(const std::vector<Span>& spans, const std::string& service_name) {
  std::string resource;
  put_bytes(resource, 1, key_value({"service.name", service_name}));
  std::string scope;
  put_bytes(scope, 1, "inferbench");
  std::string scope_spans;
  put_bytes(scope_spans, 1, scope);
  for (const Span& s : spans) put_bytes(scope_spans, 2, span_message(s));
  std::string resource_spans;
  put_bytes(resource_spans, 1, resource);
  put_bytes(resource_spans, 2, scope_spans);
  std::string request;
  put_bytes(request, 1, resource_spans);
  return request;
}

}  // namespace ib
