#pragma once
// A job or a replay the engine runs on a thread of its own, and how the control thread steers it.

#include <nlohmann/json.hpp>

#include <atomic>
#include <string>
#include <thread>

namespace meshbench::service {

// The atomics are how the control thread steers it; `status` is what it last said on the feed,
// kept by the control thread.
struct Worker {
    std::string source;  // "job-N", "replay-N"
    std::thread thread;
    std::atomic<bool> stop{false};
    std::atomic<bool> done{false};
    std::atomic<bool> paused{false};
    std::atomic<double> speed{1.0};
    std::atomic<int> seekStep{-1};
    nlohmann::json status = nlohmann::json::object();
    std::string failure;  // why it ended early, for the replay command; written before `done`
};

}  // namespace meshbench::service
