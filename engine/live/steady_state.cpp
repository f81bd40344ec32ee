#include "steady_state.h"

#include <algorithm>

namespace meshbench::live {

double median(std::vector<double> values)
{
    const std::size_t n = values.size();
    std::sort(values.begin(), values.end());
    return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace meshbench::live
