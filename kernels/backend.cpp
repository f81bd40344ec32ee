#include "kernels/backend.h"

#include <cmath>
#include <limits>
#include <string>

namespace meshbench::kernels {

std::size_t dtypeSize(DType dtype)
{
    switch (dtype) {
    case DType::F32:
        return 4;
    case DType::BF16:
        return 2;
    }
    throw KernelError("unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

std::string_view dtypeName(DType dtype)
{
    switch (dtype) {
    case DType::F32:
        return "f32";
    case DType::BF16:
        return "bf16";
    }
    return "unknown";
}

int routerCapacity(int tokens, int experts, int topK, double capacityFactor)
{
    if (experts <= 0)
        throw KernelError("routerCapacity: experts must be positive, got " + std::to_string(experts));
    // ceil(T k / E x capacity_factor) in double. A capacity factor read from decimal text is not
    // exact in binary (10 x 1.1 = 11.000000000000002), so a relative slack far below one token keeps
    // such products from rounding up to a whole extra row.
    const double exact = double(tokens) * double(topK) / double(experts) * capacityFactor;
    if (!(exact > 0.0))
        return 1;  // also NaN
    const double rounded = std::ceil(exact - exact * 1e-12);
    if (rounded >= double(std::numeric_limits<int>::max()))
        throw KernelError("routerCapacity: capacity " + std::to_string(exact) + " does not fit an int");
    return rounded < 1.0 ? 1 : static_cast<int>(rounded);
}

}  // namespace meshbench::kernels
