#pragma once
// The device kernels of an imported session (store::KernelRow) that lie in one time window, read from
// the session on demand: a session may hold tens of millions, so the timeline never holds more than
// the window around what it shows, and only when it is zoomed in far enough to tell kernels apart
// (kernelsLegible, the one rule for both reading and drawing them). Qt-free, so a worker thread
// can read a window.

#include "store/session_store.h"

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

namespace meshbench::app {

// Kernels are read and drawn at or below 10 us per pixel. A training step's kernels last from a few
// us (elementwise) to ms (GEMMs, collectives): at 10 us per pixel those from 10 us up are blocks of
// their own, and the window a plot shows (10 ms across 1000 px) holds thousands of kernels per rank,
// a query of milliseconds, where a zoomed-out view would ask for a whole session's millions.
constexpr double kKernelMaxNsPerPixel = 10'000;
bool kernelsLegible(std::int64_t t0, std::int64_t t1, int pixels);
// The window read for a visible [t0, t1]: it and one width either side, so that panning by up to a
// screen, or zooming in, reads nothing new.
std::pair<std::int64_t, std::int64_t> kernelWindowFor(std::int64_t t0, std::int64_t t1);

// One stream's kernels, by begin time (a stream runs its kernels one after another).
struct KernelLane {
    std::int32_t stream = 0;
    std::vector<store::KernelRow> kernels;
    std::int64_t longest = 0;  // bounds how far before a time a kernel overlapping it may begin

    // The index from which the kernels overlapping [t, ...) lie (some from there may end before t).
    std::size_t scanStart(std::int64_t t) const;
    // The kernel containing t (of two, the later), else the nearest within `tolerance` ns.
    const store::KernelRow* near(std::int64_t t, std::int64_t tolerance) const;
};

class KernelWindow {
public:
    KernelWindow() = default;
    KernelWindow(std::int64_t t0, std::int64_t t1) : m_t0(t0), m_t1(t1) {}

    // The window read: every kernel overlapping [t0, t1] on the ranks asked for.
    std::int64_t t0() const { return m_t0; }
    std::int64_t t1() const { return m_t1; }
    bool covers(std::int64_t t0, std::int64_t t1) const { return m_t0 <= t0 && t1 <= m_t1; }
    std::size_t size() const { return m_size; }

    // A rank's streams, by stream id (empty for a rank without kernels in the window).
    std::span<const KernelLane> lanes(int rank) const;
    const std::map<int, std::vector<KernelLane>>& ranks() const { return m_ranks; }

    // In begin order per rank and stream, as SessionReader::kernels visits them.
    void add(int rank, const store::KernelRow& kernel);

private:
    std::int64_t m_t0 = 0, m_t1 = -1;
    std::map<int, std::vector<KernelLane>> m_ranks;
    std::size_t m_size = 0;
};

// The kernels of `ranks` overlapping [t0, t1]. The ranks are named rather than left empty, which
// would have the store list the kernels table's ranks by reading all of it. Throws store::StoreError.
KernelWindow loadKernelWindow(const store::SessionReader& reader, std::int64_t t0, std::int64_t t1,
                              std::span<const std::uint32_t> ranks);

}  // namespace meshbench::app
