#include "timeline/kernel_window.h"

#include <algorithm>
#include <limits>

namespace meshbench::app {

namespace {

constexpr std::size_t kNearScanLimit = 64;  // kernels looked at before a time, for the hover

}  // namespace

bool kernelsLegible(std::int64_t t0, std::int64_t t1, int pixels)
{
    return pixels > 0 && t1 > t0 && double(t1 - t0) / pixels <= kKernelMaxNsPerPixel;
}

std::pair<std::int64_t, std::int64_t> kernelWindowFor(std::int64_t t0, std::int64_t t1)
{
    const std::int64_t width = std::max<std::int64_t>(0, t1 - t0);
    const std::int64_t low = std::numeric_limits<std::int64_t>::min() + width;
    const std::int64_t high = std::numeric_limits<std::int64_t>::max() - width;
    return {t0 > low ? t0 - width : std::numeric_limits<std::int64_t>::min(),
            t1 < high ? t1 + width : std::numeric_limits<std::int64_t>::max()};
}

std::size_t KernelLane::scanStart(std::int64_t t) const
{
    const std::int64_t from = t > std::numeric_limits<std::int64_t>::min() + longest ? t - longest : t;
    return std::size_t(std::lower_bound(kernels.begin(), kernels.end(), from,
                                        [](const store::KernelRow& k, std::int64_t v) { return k.beginNs < v; }) -
                       kernels.begin());
}

const store::KernelRow* KernelLane::near(std::int64_t t, std::int64_t tolerance) const
{
    const store::KernelRow* best = nullptr;
    std::int64_t bestDistance = tolerance + 1;
    const auto stop =
        std::size_t(std::upper_bound(kernels.begin(), kernels.end(), t + tolerance,
                                     [](std::int64_t v, const store::KernelRow& k) { return v < k.beginNs; }) -
                    kernels.begin());
    const std::size_t first = std::max(scanStart(t - tolerance), stop > kNearScanLimit ? stop - kNearScanLimit : 0);
    for (std::size_t i = first; i < stop; ++i) {
        const store::KernelRow& k = kernels[i];
        const std::int64_t distance = t < k.beginNs ? k.beginNs - t : t >= k.endNs ? t - k.endNs : 0;
        if (distance < bestDistance || (distance == 0 && bestDistance == 0)) {
            best = &k;
            bestDistance = distance;
        }
    }
    return best;
}

std::span<const KernelLane> KernelWindow::lanes(int rank) const
{
    const auto it = m_ranks.find(rank);
    return it == m_ranks.end() ? std::span<const KernelLane>() : std::span<const KernelLane>(it->second);
}

void KernelWindow::add(int rank, const store::KernelRow& kernel)
{
    std::vector<KernelLane>& lanes = m_ranks[rank];
    auto lane = std::lower_bound(lanes.begin(), lanes.end(), kernel.stream,
                                 [](const KernelLane& l, std::int32_t stream) { return l.stream < stream; });
    if (lane == lanes.end() || lane->stream != kernel.stream)
        lane = lanes.insert(lane, KernelLane{kernel.stream, {}, 0});
    lane->kernels.push_back(kernel);
    lane->longest = std::max(lane->longest, kernel.endNs - kernel.beginNs);
    ++m_size;
}

KernelWindow loadKernelWindow(const store::SessionReader& reader, std::int64_t t0, std::int64_t t1,
                              std::span<const std::uint32_t> ranks)
{
    KernelWindow window(t0, t1);
    if (ranks.empty())
        return window;
    reader.kernels(t0, t1, ranks, [&](std::uint32_t rank, const store::KernelRow& kernel) {
        store::KernelRow k = kernel;
        k.endNs = std::max(k.endNs, k.beginNs);  // a reversed kernel is drawn as an instant
        window.add(int(rank), k);
    });
    return window;
}

}  // namespace meshbench::app
