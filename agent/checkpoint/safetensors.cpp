#include "agent/checkpoint/safetensors.h"

#include "wire/error_text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace meshbench::agent {

namespace {

using ordered_json = nlohmann::ordered_json;

// A header larger than this is corruption, not a model (the reference implementation's
// limit is also 100 MB: safetensors/src/tensor.rs, MAX_HEADER_SIZE).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// A header nests three levels (the header, a tensor, its shape); far deeper is corruption. It is
// refused before parsing, because ordered_json copies members recursively when an object grows,
// and a crafted header nesting a million levels deep overflows the stack.
constexpr std::size_t kMaxNesting = 64;

// The deepest nesting of arrays and objects in JSON text. Brackets inside strings do not count;
// on text that is not JSON the figure is still at least what a parser reaches before it fails.
std::size_t nestingDepth(std::string_view text)
{
    std::size_t depth = 0, deepest = 0;
    bool inString = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (inString) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                inString = false;
        } else if (c == '"') {
            inString = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

// Bytes per element of the format's whole-byte dtypes (safetensors/src/tensor.rs, Dtype).
int dtypeSize(const std::string& dtype)
{
    static const std::map<std::string, int> sizes = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
        {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
        {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8},
    };
    const auto it = sizes.find(dtype);
    return it == sizes.end() ? 0 : it->second;
}

std::string shapeText(const std::vector<std::int64_t>& shape)
{
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// A header value as messages show it: a scalar as written (cut short on a character boundary),
// an array or object by its size alone. Printing a structure recurses once per level of nesting,
// and a crafted header nests millions of levels deep.
std::string brief(const ordered_json& value)
{
    if (value.is_structured())
        return std::string(value.is_array() ? "an array" : "an object") + " of " + std::to_string(value.size()) +
               " entries";
    constexpr std::size_t kLimit = 40;
    std::string text = value.dump();
    if (text.size() <= kLimit)
        return text;
    std::size_t cut = kLimit;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
        --cut;
    return text.substr(0, cut) + "...";
}

// product(shape) * elementBytes, or false when it overflows 64 bits (a zero dim wins).
bool byteCount(const std::vector<std::int64_t>& shape, std::uint64_t elementBytes, std::uint64_t& bytes)
{
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
        bytes = 0;
        return true;
    }
    std::uint64_t total = elementBytes;
    for (const std::int64_t dim : shape) {
        const auto d = static_cast<std::uint64_t>(dim);
        if (total > std::numeric_limits<std::uint64_t>::max() / d)
            return false;
        total *= d;
    }
    bytes = total;
    return true;
}

void writeAll(int fd, const void* data, std::size_t size, const std::string& tmp)
{
    const auto* p = static_cast<const unsigned char*>(data);
    while (size > 0) {
        const ssize_t n = ::write(fd, p, std::min<std::size_t>(size, std::size_t{1} << 30));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            throw CheckpointError("cannot write checkpoint " + quoted(tmp) + ": " + wire::errorText(errno));
        }
        p += n;
        size -= static_cast<std::size_t>(n);
    }
}

void writeFloats(int fd, const float* data, std::size_t count, const std::string& tmp)
{
    if constexpr (std::endian::native == std::endian::little) {
        writeAll(fd, data, count * sizeof(float), tmp);
    } else {
        std::vector<unsigned char> chunk;
        for (std::size_t i = 0; i < count;) {
            const std::size_t n = std::min<std::size_t>(count - i, 1 << 16);
            chunk.resize(n * 4);
            for (std::size_t j = 0; j < n; ++j) {
                const auto bits = std::bit_cast<std::uint32_t>(data[i + j]);
                for (int b = 0; b < 4; ++b)
                    chunk[4 * j + static_cast<std::size_t>(b)] = static_cast<unsigned char>(bits >> (8 * b));
            }
            writeAll(fd, chunk.data(), chunk.size(), tmp);
            i += n;
        }
    }
}

std::uint64_t readU64Le(const unsigned char* p)
{
    std::uint64_t value = 0;
    for (int i = 7; i >= 0; --i)
        value = (value << 8) | p[i];
    return value;
}

}  // namespace

void writeSafetensors(const std::string& path, const std::vector<TensorRecord>& tensors,
                      const std::map<std::string, std::string>& metadata)
{
    ordered_json header = ordered_json::object();
    if (!metadata.empty()) {
        ordered_json meta = ordered_json::object();
        for (const auto& [key, value] : metadata)
            meta[key] = value;
        header["__metadata__"] = std::move(meta);
    }
    std::uint64_t offset = 0;
    std::vector<std::size_t> counts;
    for (const TensorRecord& t : tensors) {
        if (t.name.empty() || t.name == "__metadata__")
            throw CheckpointError("cannot write checkpoint " + quoted(path) + ": invalid tensor name " +
                                  quoted(t.name));
        if (header.contains(t.name))
            throw CheckpointError("cannot write checkpoint " + quoted(path) + ": tensor " + quoted(t.name) +
                                  " is listed twice");
        if (std::any_of(t.shape.begin(), t.shape.end(), [](std::int64_t d) { return d < 0; }))
            throw CheckpointError("cannot write checkpoint " + quoted(path) + ": tensor " + quoted(t.name) +
                                  " has a negative dimension in " + shapeText(t.shape));
        std::uint64_t bytes = 0;
        if (!byteCount(t.shape, 4, bytes) || bytes > std::numeric_limits<std::uint64_t>::max() - offset)
            throw CheckpointError("cannot write checkpoint " + quoted(path) + ": tensor " + quoted(t.name) +
                                  " of shape " + shapeText(t.shape) + " is too large");
        if (bytes > 0 && t.data == nullptr)
            throw CheckpointError("cannot write checkpoint " + quoted(path) + ": tensor " + quoted(t.name) +
                                  " has no data");
        header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
        counts.push_back(static_cast<std::size_t>(bytes / 4));
    }

    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception& e) {
        throw CheckpointError("cannot write checkpoint " + quoted(path) +
                              ": a tensor name or metadata string is not valid UTF-8 (" + e.what() + ")");
    }
    text.append((8 - text.size() % 8) % 8, ' ');  // the reference pads with spaces to 8 bytes
    unsigned char length[8];
    for (int i = 0; i < 8; ++i)
        length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));

    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        throw CheckpointError("cannot create checkpoint " + quoted(tmp) + ": " + wire::errorText(errno) +
                              "; check that the directory exists and is writable");
    try {
        writeAll(fd, length, sizeof length, tmp);
        writeAll(fd, text.data(), text.size(), tmp);
        for (std::size_t i = 0; i < tensors.size(); ++i)
            writeFloats(fd, tensors[i].data, counts[i], tmp);
        if (::fsync(fd) != 0)
            throw CheckpointError("cannot flush checkpoint " + quoted(tmp) + ": " + wire::errorText(errno));
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    if (::close(fd) != 0) {
        const std::string why = wire::errorText(errno);
        ::unlink(tmp.c_str());
        throw CheckpointError("cannot write checkpoint " + quoted(tmp) + ": " + why);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = wire::errorText(errno);
        ::unlink(tmp.c_str());
        throw CheckpointError("cannot rename " + quoted(tmp) + " to " + quoted(path) + ": " + why);
    }
    // Make the rename itself durable (best effort: some file systems refuse fsync on a directory).
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    const int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirFd >= 0) {
        (void)::fsync(dirFd);
        ::close(dirFd);
    }
}

SafetensorsFile SafetensorsFile::open(const std::string& path)
{
    const std::string where = "checkpoint " + quoted(path);
    SafetensorsFile file;
    file.m_path = path;
    file.m_file = MappedFile(path);
    switch (file.m_file.failure()) {
    case MappedFile::Failure::None:
        break;
    case MappedFile::Failure::Open:
        throw CheckpointError("cannot open " + where + ": " + file.m_file.error());
    case MappedFile::Failure::Directory:
    case MappedFile::Failure::NotRegular:
        throw CheckpointError("cannot read " + where + ": it is not a regular file");
    case MappedFile::Failure::Map:
        throw CheckpointError("cannot map " + where + ": " + file.m_file.error());
    }
    file.index(where);
    return file;
}

SafetensorsFile SafetensorsFile::fromBytes(std::vector<unsigned char> bytes, const std::string& name)
{
    SafetensorsFile file;
    file.m_path = name;
    file.m_bytes = std::move(bytes);
    file.index("checkpoint " + quoted(name));
    return file;
}

void SafetensorsFile::index(const std::string& where)
{
    const std::uint64_t fileBytes = size();
    if (fileBytes < 8)
        throw CheckpointError(where + " is " + std::to_string(fileBytes) +
                              " bytes, too short for a safetensors file (an 8-byte header length comes "
                              "first); is it truncated?");

    const std::uint64_t headerBytes = readU64Le(bytes());
    if (headerBytes > kMaxHeaderBytes)
        throw CheckpointError(where + ": header length " + std::to_string(headerBytes) +
                              " is absurd (over 100 MB); the file is not safetensors or is corrupt");
    if (headerBytes > fileBytes - 8)
        throw CheckpointError(where + ": header length " + std::to_string(headerBytes) + " exceeds the " +
                              std::to_string(fileBytes - 8) + " bytes after it; is the file truncated?");
    const std::uint64_t dataBegin = 8 + headerBytes;
    const std::uint64_t dataBytes = fileBytes - dataBegin;

    const std::string_view headerText(reinterpret_cast<const char*>(bytes() + 8), headerBytes);
    if (const std::size_t depth = nestingDepth(headerText); depth > kMaxNesting)
        throw CheckpointError(where + ": the header nests " + std::to_string(depth) +
                              " levels deep (a safetensors header needs 3); the file is corrupt");
    ordered_json header;
    try {
        header = ordered_json::parse(headerText.begin(), headerText.end());
    } catch (const nlohmann::json::exception& e) {
        throw CheckpointError(where + ": the header is not valid JSON (" + e.what() + ")");
    }
    if (!header.is_object())
        throw CheckpointError(where + ": the header is JSON " + std::string(header.type_name()) +
                              ", not an object of tensors");

    for (const auto& [name, value] : header.items()) {
        const std::string what = where + ": tensor " + quoted(name);
        if (name == "__metadata__") {
            if (!value.is_object())
                throw CheckpointError(where + ": __metadata__ must be an object of strings");
            for (const auto& [key, text] : value.items()) {
                if (!text.is_string())
                    throw CheckpointError(where + ": __metadata__ entry " + quoted(key) + " is not a string");
                m_metadata[key] = text.get<std::string>();
            }
            continue;
        }
        if (!value.is_object())
            throw CheckpointError(what + " is not an object with dtype, shape and data_offsets");
        const auto dtype = value.find("dtype");
        const auto shape = value.find("shape");
        const auto offsets = value.find("data_offsets");
        if (dtype == value.end() || !dtype->is_string())
            throw CheckpointError(what + " has no dtype string");
        if (shape == value.end() || !shape->is_array())
            throw CheckpointError(what + " has no shape array");
        if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2)
            throw CheckpointError(what + " has no data_offsets pair [begin, end]");

        Entry e;
        e.name = name;
        e.dtype = dtype->get<std::string>();
        const int elementBytes = dtypeSize(e.dtype);
        if (elementBytes == 0)
            throw CheckpointError(what + " has unknown or unsupported dtype \"" + e.dtype + "\"");
        for (const auto& dim : *shape) {
            if (!dim.is_number_integer())
                throw CheckpointError(what + " has a shape entry that is not an integer: " + brief(dim));
            constexpr auto maxDim = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
            if (!dim.is_number_unsigned() || dim.get<std::uint64_t>() > maxDim)
                throw CheckpointError(what + " has an invalid dimension " + brief(dim));
            e.shape.push_back(dim.get<std::int64_t>());
        }
        const std::string offsetsText = "[" + brief((*offsets)[0]) + ", " + brief((*offsets)[1]) + "]";
        for (const auto& o : *offsets)
            if (!o.is_number_unsigned())
                throw CheckpointError(what + " has data_offsets " + offsetsText +
                                      " that are not non-negative integers");
        const auto begin = (*offsets)[0].get<std::uint64_t>();
        const auto end = (*offsets)[1].get<std::uint64_t>();
        if (end < begin)
            throw CheckpointError(what + " has data_offsets " + offsetsText + " that end before they begin");
        if (end > dataBytes)
            throw CheckpointError(what + " has data_offsets " + offsetsText + " beyond the " +
                                  std::to_string(dataBytes) + "-byte data section; is the file truncated?");
        std::uint64_t tensorBytes = 0;
        if (!byteCount(e.shape, static_cast<std::uint64_t>(elementBytes), tensorBytes) || tensorBytes != end - begin)
            throw CheckpointError(what + " of shape " + shapeText(e.shape) + " and dtype " + e.dtype +
                                  " does not match its " + std::to_string(end - begin) + " bytes of data");
        e.begin = dataBegin + begin;
        e.end = dataBegin + end;
        m_index[name] = m_entries.size();
        m_entries.push_back(std::move(e));
    }

    // No two tensors may share bytes (empty tensors occupy none).
    std::vector<const Entry*> byOffset;
    for (const Entry& e : m_entries)
        if (e.end > e.begin)
            byOffset.push_back(&e);
    std::sort(byOffset.begin(), byOffset.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
    for (std::size_t i = 1; i < byOffset.size(); ++i)
        if (byOffset[i]->begin < byOffset[i - 1]->end)
            throw CheckpointError(where + ": tensors " + quoted(byOffset[i - 1]->name) + " and " +
                                  quoted(byOffset[i]->name) + " overlap in the data section");
}

std::vector<std::string> SafetensorsFile::names() const
{
    std::vector<std::string> result;
    result.reserve(m_entries.size());
    for (const Entry& e : m_entries)
        result.push_back(e.name);
    return result;
}

bool SafetensorsFile::contains(const std::string& name) const { return m_index.count(name) != 0; }

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const
{
    const auto it = m_index.find(name);
    if (it == m_index.end())
        throw CheckpointError("checkpoint " + quoted(m_path) + " has no tensor " + quoted(name) +
                              "; was it written for a different model?");
    return m_entries[it->second];
}

std::vector<std::int64_t> SafetensorsFile::shape(const std::string& name) const { return entry(name).shape; }

std::string SafetensorsFile::dtype(const std::string& name) const { return entry(name).dtype; }

void SafetensorsFile::readF32(const std::string& name, const std::vector<std::int64_t>& expectedShape, float* out) const
{
    const Entry& e = entry(name);
    if (e.dtype != "F32")
        throw CheckpointError("tensor " + quoted(name) + " is " + e.dtype + " in checkpoint " + quoted(m_path) +
                              "; only F32 tensors can be loaded");
    if (e.shape != expectedShape)
        throw CheckpointError("tensor " + quoted(name) + " has shape " + shapeText(e.shape) +
                              " in the checkpoint but the job needs " + shapeText(expectedShape));
    if (bytes() == nullptr)
        throw CheckpointError("checkpoint " + quoted(m_path) + " was moved from");
    const std::size_t count = static_cast<std::size_t>((e.end - e.begin) / 4);
    const unsigned char* p = bytes() + e.begin;
    if constexpr (std::endian::native == std::endian::little) {
        if (count > 0)
            std::memcpy(out, p, count * 4);
    } else {
        for (std::size_t i = 0; i < count; ++i) {
            std::uint32_t bits = 0;
            for (int b = 3; b >= 0; --b)
                bits = (bits << 8) | p[4 * i + static_cast<std::size_t>(b)];
            out[i] = std::bit_cast<float>(bits);
        }
    }
}

}  // namespace meshbench::agent
