// The result directory: resolved and checked before anything runs, created only after every
// input was validated, so a bad flag leaves nothing behind.
#pragma once

#include <filesystem>
#include <string>

#include "core/result.h"

namespace ib {

// Files a benchmark writes into its result directory.
inline constexpr const char* kResultJson = "result.json";
inline constexpr const char* kRequestsJsonl = "requests.jsonl";
inline constexpr const char* kSummaryCsv = "summary.csv";

// --result-dir, or results/<model>-<utc stamp> when flag_value is empty. Creates nothing.
// User errors: the path is a file; it is a non-empty directory and overwrite is false; its
// nearest existing parent is not writable.
Result<std::filesystem::path> plan_result_dir(const std::string& flag_value,
                                              const std::string& model_name, bool overwrite);

// Creates the directory; with overwrite, first removes the files a previous benchmark wrote
// there (other files are left alone).
Status create_result_dir(const std::filesystem::path& dir, bool overwrite);

}  // namespace ib
