#include "error_text.h"

#include <cstring>

namespace meshbench::wire {

std::string errorText(int error)
{
    char buffer[256];
    // The GNU strerror_r (g++ defines _GNU_SOURCE): it returns the words, in buffer or a constant.
    return strerror_r(error, buffer, sizeof buffer);
}

}  // namespace meshbench::wire
