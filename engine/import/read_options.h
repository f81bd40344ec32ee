#pragma once
// What every trace reader is told: how steps are marked, where to report progress, and when to stop.

#include "op_names.h"

#include <atomic>
#include <cstdint>
#include <functional>

namespace meshbench::import {

struct ReadOptions {
    StepMarker steps;
    // Called now and then with the bytes of the file read so far and the events read so far.
    std::function<void(std::uint64_t bytes, std::uint64_t events)> progress;
    const std::atomic<bool>* cancel = nullptr;  // once set, the import stops with an ImportError saying so

    bool cancelled() const { return cancel && cancel->load(std::memory_order_relaxed); }
};

}  // namespace meshbench::import
