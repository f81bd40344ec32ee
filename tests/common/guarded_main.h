#pragma once
// main() for a benchmark or a test harness: whatever its work lets out is printed with the program's
// name and ends it with `failedStatus`, never with an abort, and no figure follows the message.

#include <cstdio>
#include <exception>

namespace meshbench::testing {

template <typename Work>
int guardedMain(const char* program, int failedStatus, Work&& work)
{
    try {
        return work();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
    } catch (...) {
        std::fprintf(stderr, "%s: an unknown exception\n", program);
    }
    return failedStatus;
}

}  // namespace meshbench::testing
