// SafetensorsCheckpoint: memory-mapped safetensors files (one, or the shards of an index) with
// tensors addressed by HF name.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/fs.h"
#include "model/detail/mapped_file.h"
#include "model/safetensors.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

struct MappedShard {
  detail::MappedFile file;
  SafetensorsFile layout;
};

class MappedCheckpoint final : public SafetensorsCheckpoint {
 public:
  bool contains(const std::string& name) const override { return index_.count(name) != 0; }

  Result<HostTensorRef> get(const std::string& name) const override {
    const auto it = index_.find(name);
    if (it == index_.end()) {
      return user_error("tensor '" + name + "' is not in the checkpoint (" +
                        std::to_string(index_.size()) + " tensors in " + describe_files() + ")");
    }
    const MappedShard& shard = shards_[it->second];
    const SafetensorsEntry& e = shard.layout.header.tensors.at(name);
    HostTensorRef ref;
    ref.data = shard.file.bytes().data() + shard.layout.data_offset + e.begin;
    ref.dtype = e.dtype;
    ref.shape = e.shape;
    return ref;
  }

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(index_.size());
    for (const auto& [name, shard] : index_) out.push_back(name);
    return out;
  }

  std::vector<std::string> files() const override {
    std::vector<std::string> out;
    for (const auto& s : shards_) out.push_back(s.file.path());
    return out;
  }

  // Maps one file and parses its header; returns its shard number.
  Result<size_t> add_file(const std::string& path) {
    IB_ASSIGN_OR_RETURN(auto file, detail::MappedFile::open(path));
    IB_ASSIGN_OR_RETURN(auto layout, parse_safetensors_file(file.bytes(), path));
    shards_.push_back(MappedShard{std::move(file), std::move(layout)});
    return shards_.size() - 1;
  }

  void index_all(size_t shard) {
    for (const auto& [name, entry] : shards_[shard].layout.header.tensors) index_[name] = shard;
  }

  Status index_one(const std::string& name, size_t shard) {
    if (shards_[shard].layout.header.tensors.count(name) == 0) {
      return user_error("tensor '" + name + "' is mapped to " + shards_[shard].file.path() +
                        " by " + kIndexFile + " but that file does not contain it");
    }
    index_[name] = shard;
    return Ok{};
  }

 private:
  std::string describe_files() const {
    if (shards_.size() == 1) return shards_[0].file.path();
    return std::to_string(shards_.size()) + " files";
  }

  std::vector<MappedShard> shards_;
  std::map<std::string, size_t> index_;  // tensor name -> shard
};

// A shard name from weight_map must be a plain relative path inside the model directory.
bool is_safe_shard_name(const std::string& s) {
  if (s.empty() || s.front() == '/') return false;
  for (const auto& part : fs::path(s)) {
    if (part == "..") return false;
  }
  return true;
}

Result<std::unique_ptr<SafetensorsCheckpoint>> open_index(const fs::path& index_path) {
  const std::string where = index_path.string();
  IB_ASSIGN_OR_RETURN(const std::string text, read_file(index_path));
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return user_error(where + " is not a JSON object; re-download the checkpoint");
  }
  const auto wm = root.find("weight_map");
  if (wm == root.end() || !wm->is_object() || wm->empty()) {
    return user_error(where + " has no \"weight_map\" object naming the shard of each tensor");
  }
  auto ckpt = std::make_unique<MappedCheckpoint>();
  std::map<std::string, size_t> shard_of_file;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string() || !is_safe_shard_name(file.get_ref<const std::string&>())) {
      return user_error(where + ": weight_map entry for '" + name +
                        "' must be a shard file name inside the model directory");
    }
    const auto& file_name = file.get_ref<const std::string&>();
    auto it = shard_of_file.find(file_name);
    if (it == shard_of_file.end()) {
      const fs::path shard_path = index_path.parent_path() / file_name;
      if (!fs::is_regular_file(shard_path)) {
        return user_error(where + " names shard " + file_name + ", which is missing from " +
                          index_path.parent_path().string() + "; download every shard");
      }
      IB_ASSIGN_OR_RETURN(const size_t shard, ckpt->add_file(shard_path.string()));
      it = shard_of_file.emplace(file_name, shard).first;
    }
    IB_TRY(ckpt->index_one(name, it->second));
  }
  return std::unique_ptr<SafetensorsCheckpoint>(std::move(ckpt));
}

Result<std::unique_ptr<SafetensorsCheckpoint>> open_single(const fs::path& path) {
  auto ckpt = std::make_unique<MappedCheckpoint>();
  IB_ASSIGN_OR_RETURN(const size_t shard, ckpt->add_file(path.string()));
  ckpt->index_all(shard);
  return std::unique_ptr<SafetensorsCheckpoint>(std::move(ckpt));
}

}  // namespace

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open(
    const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::is_regular_file(p / kIndexFile, ec)) {
      try {
        return open_index(p / kIndexFile);
      } catch (const Json::exception& e) {  // defensive: every access is type-checked
        return user_error((p / kIndexFile).string() + ": " + e.what());
      }
    }
    if (fs::is_regular_file(p / kSingleFile, ec)) return open_single(p / kSingleFile);
    return user_error(path + " holds neither " + kSingleFile + " nor " + kIndexFile +
                      "; point --model at a Hugging Face model directory or use --load-format "
                      "dummy");
  }
  if (fs::is_regular_file(p, ec)) return open_single(p);
  return user_error("no safetensors weights at " + path + " (no such file or directory)");
}

bool has_safetensors(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    return fs::is_regular_file(p / kIndexFile, ec) || fs::is_regular_file(p / kSingleFile, ec);
  }
  return fs::is_regular_file(p, ec) && p.extension() == ".safetensors";
}

}  // namespace ib
