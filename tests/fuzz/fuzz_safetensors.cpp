// libFuzzer target for the checkpoint reader. Any input must open or be refused with a
// CheckpointError (any other exception escapes and is reported), without a bad read (ASan) or
// undefined behaviour (UBSan). What opens must hold together: every listed tensor is found with
// its shape, only F32 tensors read, a wrong shape is refused; and it must survive the writer: its
// F32 tensors and metadata, written again, read back as the same names, shapes and bits, and a
// second round writes the very same bytes.

#include "agent/checkpoint/safetensors.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

using namespace meshbench::agent;

namespace {

struct Tensor {
    std::string name;
    std::vector<std::int64_t> shape;
    std::vector<float> values;
};

// The F32 tensors of a file, in header order, read in full.
std::vector<Tensor> readTensors(const SafetensorsFile& file)
{
    std::vector<Tensor> tensors;
    for (const std::string& name : file.names()) {
        if (!file.contains(name))
            __builtin_trap();
        if (file.dtype(name) != "F32")
            continue;
        Tensor t{name, file.shape(name), {}};
        std::size_t count = 1;
        for (const std::int64_t d : t.shape)
            count *= static_cast<std::size_t>(d);  // cannot overflow: the data lies in the input
        t.values.resize(count);
        file.readF32(name, t.shape, t.values.data());
        tensors.push_back(std::move(t));
    }
    return tensors;
}

bool sameBits(const std::vector<Tensor>& a, const std::vector<Tensor>& b)
{
    if (a.size() != b.size())
        return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].name != b[i].name || a[i].shape != b[i].shape || a[i].values.size() != b[i].values.size() ||
            (!a[i].values.empty() && std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * 4) != 0))
            return false;
    return true;
}

std::string write(const std::string& path, const std::vector<Tensor>& tensors,
                  const std::map<std::string, std::string>& metadata)
{
    std::vector<TensorRecord> records;
    for (const Tensor& t : tensors)
        records.push_back({t.name, t.shape, t.values.data()});
    writeSafetensors(path, records, metadata);
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Where the round trip writes: shared memory where there is some (the writer syncs every file,
// which costs nothing there); removed when the run ends.
struct Scratch {
    std::string path;
    Scratch()
    {
        const std::filesystem::path dir = std::filesystem::is_directory("/dev/shm")
                                              ? std::filesystem::path("/dev/shm")
                                              : std::filesystem::temp_directory_path();
        path = (dir / ("fuzz_safetensors-" + std::to_string(::getpid()) + ".safetensors")).string();
    }
    ~Scratch()
    {
        std::error_code ignored;
        std::filesystem::remove(path, ignored);
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::vector<Tensor> tensors;
    std::map<std::string, std::string> metadata;
    try {
        const SafetensorsFile file = SafetensorsFile::fromBytes({data, data + size}, "fuzz input");
        for (const std::string& name : file.names()) {
            std::vector<std::int64_t> wrong = file.shape(name);
            wrong.push_back(1);
            float sink = 0;
            // A wrong shape, or a dtype other than F32, is refused before anything is copied.
            try {
                file.readF32(name, wrong, &sink);
                __builtin_trap();
            } catch (const CheckpointError&) {
            }
            if (file.dtype(name) != "F32") {
                try {
                    file.readF32(name, file.shape(name), nullptr);
                    __builtin_trap();
                } catch (const CheckpointError&) {
                }
            }
        }
        tensors = readTensors(file);
        metadata = file.metadata();
    } catch (const CheckpointError&) {
        return 0;
    }

    // The writer refuses an empty name, which the reader lets through; such tensors stay behind.
    std::erase_if(tensors, [](const Tensor& t) { return t.name.empty(); });
    static const Scratch scratchFile;
    const std::string& scratch = scratchFile.path;
    const std::string once = write(scratch, tensors, metadata);
    const SafetensorsFile reread = SafetensorsFile::fromBytes({once.begin(), once.end()}, scratch);
    const std::vector<Tensor> again = readTensors(reread);
    if (!sameBits(tensors, again) || reread.metadata() != metadata || reread.names().size() != again.size())
        __builtin_trap();
    if (write(scratch, again, reread.metadata()) != once)
        __builtin_trap();
    return 0;
}
