// GGUF writer (gguf_file.h): serializes metadata, tensor infos and aligned tensor data.
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "core/fs.h"
#include "model/gguf_file.h"

namespace ib {
namespace {

class Writer {
 public:
  std::string& out() { return out_; }

  template <typename T>
  void put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));  // little-endian host
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    out_.append(s);
  }
  void pad_to(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back('\0');
  }
  Status put_value(const std::string& key, const GgufValue& v);

 private:
  Status put_array(const std::string& key, const GgufArray& a);
  std::string out_;
};

Error misfit(const std::string& key, const GgufValue& v) {
  return user_error(fmt::format("cannot write metadata '{}': its value does not fit a GGUF {}", key,
                                gguf_value_type_name(v.type)));
}

// The unsigned value of v if it fits max.
std::optional<uint64_t> uint_within(const GgufValue& v, uint64_t max) {
  const auto* u = std::get_if<uint64_t>(&v.value);
  if (u == nullptr || *u > max) return std::nullopt;
  return *u;
}

std::optional<int64_t> int_within(const GgufValue& v, int64_t min, int64_t max) {
  const auto* i = std::get_if<int64_t>(&v.value);
  if (i == nullptr || *i < min || *i > max) return std::nullopt;
  return *i;
}

template <typename T>
Status put_uint(Writer& w, const std::string& key, const GgufValue& v) {
  const auto u = uint_within(v, std::numeric_limits<T>::max());
  if (!u) return misfit(key, v);
  w.put(static_cast<T>(*u));
  return Ok{};
}

template <typename T>
Status put_int(Writer& w, const std::string& key, const GgufValue& v) {
  const auto i = int_within(v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
  if (!i) return misfit(key, v);
  w.put(static_cast<T>(*i));
  return Ok{};
}

Status Writer::put_value(const std::string& key, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kU8:
      return put_uint<uint8_t>(*this, key, v);
    case GgufValueType::kU16:
      return put_uint<uint16_t>(*this, key, v);
    case GgufValueType::kU32:
      return put_uint<uint32_t>(*this, key, v);
    case GgufValueType::kU64:
      return put_uint<uint64_t>(*this, key, v);
    case GgufValueType::kI8:
      return put_int<int8_t>(*this, key, v);
    case GgufValueType::kI16:
      return put_int<int16_t>(*this, key, v);
    case GgufValueType::kI32:
      return put_int<int32_t>(*this, key, v);
    case GgufValueType::kI64:
      return put_int<int64_t>(*this, key, v);
    case GgufValueType::kF32:
    case GgufValueType::kF64: {
      const auto* f = std::get_if<double>(&v.value);
      if (f == nullptr) return misfit(key, v);
      if (v.type == GgufValueType::kF32) {
        put(static_cast<float>(*f));
      } else {
        put(*f);
      }
      return Ok{};
    }
    case GgufValueType::kBool: {
      const auto* b = std::get_if<bool>(&v.value);
      if (b == nullptr) return misfit(key, v);
      put<uint8_t>(*b ? 1 : 0);
      return Ok{};
    }
    case GgufValueType::kString: {
      const auto* s = v.as_string();
      if (s == nullptr) return misfit(key, v);
      put_string(*s);
      return Ok{};
    }
    case GgufValueType::kArray: {
      const auto* a = v.as_array();
      if (a == nullptr) return misfit(key, v);
      return put_array(key, *a);
    }
  }
  return misfit(key, v);
}

Status Writer::put_array(const std::string& key, const GgufArray& a) {
  put(static_cast<uint32_t>(a.element_type));
  put<uint64_t>(a.items.size());
  for (const GgufValue& item : a.items) {
    if (item.type != a.element_type) {
      return user_error(fmt::format("cannot write metadata '{}': an array of {} holds a {}", key,
                                    gguf_value_type_name(a.element_type),
                                    gguf_value_type_name(item.type)));
    }
    IB_TRY(put_value(key, item));
  }
  return Ok{};
}

Result<uint64_t> alignment_of(const std::vector<GgufMetadata>& metadata) {
  for (const auto& m : metadata) {
    if (m.key != "general.alignment") continue;
    const auto n = uint_within(m.value, std::numeric_limits<uint32_t>::max());
    if (m.value.type != GgufValueType::kU32 || !n || *n == 0 || (*n & (*n - 1)) != 0) {
      return user_error("cannot write general.alignment: it must be a uint32 power of two");
    }
    return *n;
  }
  return kGgufDefaultAlignment;
}

// The bytes a tensor of this type and shape takes, or an error naming the tensor.
Result<uint64_t> tensor_size(const GgufWriteTensor& t) {
  const GgmlTypeInfo& info = ggml_type_info(t.type);
  if (t.dims.empty() || t.dims.size() > 4) {
    return user_error(
        fmt::format("cannot write tensor '{}': {} dimensions (1 to 4)", t.name, t.dims.size()));
  }
  uint64_t numel = 1;
  for (const int64_t d : t.dims) {
    if (d < 0) return user_error("cannot write tensor '" + t.name + "': a negative dimension");
    numel *= static_cast<uint64_t>(d);
  }
  if (t.dims[0] % info.block_elems != 0) {
    return user_error(
        fmt::format("cannot write tensor '{}': ne[0] = {} is not a multiple of {}'s "
                    "{}-element blocks",
                    t.name, t.dims[0], info.name, info.block_elems));
  }
  const uint64_t bytes =
      numel / static_cast<uint64_t>(info.block_elems) * static_cast<uint64_t>(info.block_bytes);
  if (bytes != t.bytes.size()) {
    return user_error(fmt::format("cannot write tensor '{}': {} bytes given, {} needs {}", t.name,
                                  t.bytes.size(), info.name, bytes));
  }
  return bytes;
}

}  // namespace

Result<std::string> serialize_gguf(const std::vector<GgufMetadata>& metadata,
                                   const std::vector<GgufWriteTensor>& tensors) {
  IB_ASSIGN_OR_RETURN(const uint64_t alignment, alignment_of(metadata));
  Writer w;
  w.out().append("GGUF");
  w.put<uint32_t>(kGgufVersion);
  w.put<uint64_t>(tensors.size());
  w.put<uint64_t>(metadata.size());
  std::set<std::string, std::less<>> keys;
  for (const auto& m : metadata) {
    if (!keys.insert(m.key).second)
      return user_error("cannot write metadata '" + m.key + "' twice");
    w.put_string(m.key);
    w.put(static_cast<uint32_t>(m.value.type));
    IB_TRY(w.put_value(m.key, m.value));
  }
  std::set<std::string, std::less<>> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (!names.insert(t.name).second)
      return user_error("cannot write tensor '" + t.name + "' twice");
    IB_ASSIGN_OR_RETURN(const uint64_t bytes, tensor_size(t));
    w.put_string(t.name);
    w.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (const int64_t d : t.dims) w.put<uint64_t>(static_cast<uint64_t>(d));
    w.put<uint32_t>(static_cast<uint32_t>(t.type));
    w.put<uint64_t>(offset);
    offset = (offset + bytes + alignment - 1) / alignment * alignment;
  }
  w.pad_to(alignment);
  for (const auto& t : tensors) {
    w.out().append(t.bytes);
    w.pad_to(alignment);
  }
  return std::move(w.out());
}

Status write_gguf(const std::string& path, const std::vector<GgufMetadata>& metadata,
                  const std::vector<GgufWriteTensor>& tensors) {
  IB_ASSIGN_OR_RETURN(const std::string bytes, serialize_gguf(metadata, tensors));
  return write_file_atomic(path, bytes);
}

}  // namespace ib
