#include "command_line.h"

#include <cmath>
#include <csignal>
#include <iostream>
#include <stdexcept>
#include <thread>

#include <pthread.h>

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

const std::atomic<bool>& stopOnSignals()
{
    static std::atomic<bool> stop{false};
    sigset_t signals;
    sigemptyset(&signals);
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
        sigaddset(&signals, sig);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::thread([signals] {
        int sig = 0;
        sigwait(&signals, &sig);
        stop = true;
    }).detach();
    return stop;
}

}  // namespace meshbench::service
