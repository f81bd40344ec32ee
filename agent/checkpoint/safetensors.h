#pragma once
// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors):
//   8 bytes   N, little-endian u64: the header's length
//   N bytes   UTF-8 JSON object {"__metadata__": {str: str},
//                                name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
//             padded with spaces to a multiple of 8
//   rest      the tensors' raw little-endian bytes; offsets are relative to the start of
//             this data section.
// Files we write hold F32 tensors, contiguous, in the order given. Files we read may list
// any of the format's dtypes, but only F32 tensors can be read.

#include "agent/io/mapped_file.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshbench::agent {

// A checkpoint that cannot be written, or a file that is not a valid safetensors file or
// does not fit the job. Never an abort: every check happens before any read.
class CheckpointError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct TensorRecord {
    std::string name;
    std::vector<std::int64_t> shape;  // [] is a scalar (one element)
    const float* data = nullptr;      // product(shape) floats; may be null when that is 0
};

// Writes path + ".tmp", flushes it to disk, then renames it over path, so a crash never
// leaves a half-written checkpoint under the final name. Throws CheckpointError on a bad
// record (empty or duplicate name, "__metadata__", negative dim, null data) or I/O failure
// (the .tmp file is removed).
void writeSafetensors(const std::string& path, const std::vector<TensorRecord>& tensors,
                      const std::map<std::string, std::string>& metadata);

class SafetensorsFile {
public:
    // Maps the file and validates all of it (header, dtypes, shapes, offsets, overlaps);
    // throws CheckpointError naming the file and the problem.
    static SafetensorsFile open(const std::string& path);
    // The same checks on a whole file held in memory; `name` stands for the file in messages.
    static SafetensorsFile fromBytes(std::vector<unsigned char> bytes, const std::string& name);

    const std::string& path() const { return m_path; }
    const std::map<std::string, std::string>& metadata() const { return m_metadata; }
    // Tensor names in header order.
    std::vector<std::string> names() const;
    bool contains(const std::string& name) const;
    // Throw CheckpointError when the tensor is missing.
    std::vector<std::int64_t> shape(const std::string& name) const;
    std::string dtype(const std::string& name) const;
    // Copies an F32 tensor into out (product(expectedShape) floats). Throws CheckpointError
    // when the tensor is missing, not F32, or its shape is not expectedShape.
    void readF32(const std::string& name, const std::vector<std::int64_t>& expectedShape, float* out) const;

private:
    struct Entry {
        std::string name;
        std::string dtype;
        std::vector<std::int64_t> shape;
        std::uint64_t begin = 0;  // absolute file offsets
        std::uint64_t end = 0;
    };

    SafetensorsFile() = default;
    // Validates the bytes and indexes the tensors: open() and fromBytes() share every check.
    // `where` names the file in messages.
    void index(const std::string& where);
    const unsigned char* bytes() const { return m_file.data() ? m_file.data() : m_bytes.data(); }
    std::size_t size() const { return m_file.data() ? m_file.size() : m_bytes.size(); }
    const Entry& entry(const std::string& name) const;

    std::string m_path;
    MappedFile m_file;                   // open(): the mapped file
    std::vector<unsigned char> m_bytes;  // fromBytes(): the bytes themselves
    std::map<std::string, std::string> m_metadata;
    std::vector<Entry> m_entries;
    std::map<std::string, std::size_t> m_index;
};

}  // namespace meshbench::agent
