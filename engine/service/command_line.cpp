#include "command_line.h"

#include <cmath>
#include <iostream>
#include <stdexcept>

namespace meshbench::service {

int usageError(const std::string& message, const char* usage)
{
    std::cerr << "meshbench-engine: " << message << "\nusage: " << usage << "\n";
    return 2;
}

bool parsePositive(const std::string& text, double& out)
{
    try {
        std::size_t used = 0;
        out = std::stod(text, &used);
        return used == text.size() && std::isfinite(out) && out >= 0;
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace meshbench::service
