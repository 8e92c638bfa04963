// The built-in plugins, registered explicitly in one place (no static registration).
#pragma once

#include <string>

#include "core/plugin_registry.h"

namespace ib {

// Targets ("native"), workloads ("random-dataset", "jsonl-dataset": --dataset-name NAME selects
// NAME-dataset), collectors ("rss", "engine-pools") and report sinks ("json", "jsonl", "csv",
// "markdown").
Status register_builtin_plugins(PluginRegistry& registry);
// The workload plugin behind --dataset-name.
std::string workload_plugin_name(const std::string& dataset_name);

// The `inferbench plugins` table: load order, name, kind, version, dependencies, description.
Result<std::string> plugins_table(const PluginRegistry& registry);

}  // namespace ib
