#include "imported_trace.h"

#include <array>

namespace meshbench::store {

namespace {

constexpr std::array<std::string_view, kDeviceClasses> kNames = {"gemm",    "attention", "other-compute", "comm-tp",
                                                                 "comm-pp", "comm-dp",   "comm-ep",       "comm-other",
                                                                 "memcpy",  "memset",    "idle"};

}  // namespace

std::string_view deviceClassName(DeviceClass c) { return kNames.at(static_cast<std::size_t>(c)); }

std::optional<DeviceClass> deviceClassFromName(std::string_view name)
{
    for (std::size_t i = 0; i < kNames.size(); ++i)
        if (kNames[i] == name)
            return static_cast<DeviceClass>(i);
    return std::nullopt;
}

bool isCommunicationClass(DeviceClass c) { return c >= DeviceClass::CommTensor && c <= DeviceClass::CommOther; }

}  // namespace meshbench::store
