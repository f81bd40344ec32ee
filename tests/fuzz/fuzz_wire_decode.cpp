// libFuzzer target for the telemetry decoder. Any input must be decoded or refused, never both,
// without a bad read (ASan) or undefined behaviour (UBSan); what is decoded must survive a round
// trip through the encoder; and any bytes sent as text must arrive as valid text.

#include "wire/telemetry.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace meshbench::wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    // The encoder repairs any text: as a log line, the input must come back as one the decoder
    // accepts (valid UTF-8 within the length limit). Only inputs without the batch magic serve
    // as text, since the decoder refuses those at once anyway.
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    if (!bytes.starts_with("MBTW")) {
        const Batch text{0, 0, {LogRecord{0, LogLevel::Info, std::string(bytes)}}};
        if (!decodeBatch(encodeBatch(text)).batch)
            __builtin_trap();
    }

    const DecodeResult decoded = decodeBatch({data, size});
    if (decoded.batch.has_value() == !decoded.error.empty())
        __builtin_trap();
    if (!decoded.batch)
        return 0;
    // The encoder must take whatever the decoder accepted (it throws otherwise, which libFuzzer
    // reports), and its bytes must decode to the same batch. The batches are compared through a
    // second encoding because that is bitwise, where NaN != NaN would fail operator==.
    const std::vector<std::uint8_t> once = encodeBatch(*decoded.batch);
    const DecodeResult again = decodeBatch(once);
    if (!again.batch || again.skippedRecords != 0 || encodeBatch(*again.batch) != once)
        __builtin_trap();
    // Without skipped records or appended fields the input was already the canonical encoding.
    if (decoded.skippedRecords == 0 && once.size() == size && !std::equal(once.begin(), once.end(), data))
        __builtin_trap();
    return 0;
}
