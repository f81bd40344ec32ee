#pragma once
// Device and cluster presets with their public datasheet figures.

#include "job_spec.h"

#include <optional>
#include <string_view>
#include <vector>

namespace meshbench::plan {

std::optional<DeviceSpec> devicePreset(std::string_view kind);
std::vector<std::string_view> devicePresetNames();

// A cluster preset fills every ClusterSpec field; a spec may then override single fields.
std::optional<ClusterSpec> clusterPreset(std::string_view name);
std::vector<std::string_view> clusterPresetNames();

}  // namespace meshbench::plan
