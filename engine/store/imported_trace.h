#pragma once
// What a session imported from other tools' traces holds beyond the telemetry records (format 3):
// the source files, each rank's device kernels, and each rank's device time per step by class.
// A session of our own agent has none of them.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace meshbench::store {

// One traced file: what it is, which rank it held, and what the import recognised in it or had to
// infer (in words, for the import summary and the Sessions view).
struct ImportSource {
    std::string path;
    std::int64_t bytes = 0;
    std::string digest;  // "xxh3-128:" and the file's XXH3-128 in hex
    std::string format;  // "kineto", "kineto-array", "nsys-sqlite", "megatron-tokens-per-expert"
    std::int32_t rank = -1;
    std::string recognised;
    std::string inferred;
    bool operator==(const ImportSource&) const = default;
};

// What a span of device time was doing. Communication is split by the parallel dimension whose
// group ran it, as exposed communication per dimension is what a layout decides.
enum class DeviceClass : std::uint8_t {
    Gemm = 0,
    Attention = 1,
    OtherCompute = 2,
    CommTensor = 3,
    CommPipeline = 4,
    CommData = 5,
    CommExpert = 6,
    CommOther = 7,
    Memcpy = 8,
    Memset = 9,
    Idle = 10,
};
constexpr int kDeviceClasses = 11;
std::string_view deviceClassName(DeviceClass c);  // "gemm", "attention", ..., "comm-tp", ...
std::optional<DeviceClass> deviceClassFromName(std::string_view name);
bool isCommunicationClass(DeviceClass c);

// One kernel (or copy, or memset) as it ran, on the session's clock (the rank's clock offset applied).
struct KernelRow {
    std::int64_t beginNs = 0;
    std::int64_t endNs = 0;
    std::int32_t device = 0;
    std::int32_t stream = 0;
    DeviceClass deviceClass = DeviceClass::OtherCompute;
    std::int32_t nameId = 0;  // into the session's kernel names
    std::int32_t step = -1;   // the step that launched it, -1 outside every step kept
    bool operator==(const KernelRow&) const = default;
};

// A rank's device time in one step for one class: busy is the union of the class's kernels; for
// communication, exposed is the part no compute kernel of the device overlapped. Idle is the step's
// device window minus every kernel's union (busy = exposed).
struct DeviceTimeRow {
    std::int32_t rank = 0;
    std::int32_t step = 0;
    DeviceClass deviceClass = DeviceClass::OtherCompute;
    std::int64_t busyNs = 0;
    std::int64_t exposedNs = 0;
    bool operator==(const DeviceTimeRow&) const = default;
};

}  // namespace meshbench::store
