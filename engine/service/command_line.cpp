#include "command_line.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <csignal>
#include <stdexcept>
#include <thread>

#include <pthread.h>

namespace meshbench::service {

CLI::Validator numberThat(std::function<bool(double)> fits, const std::string& needs)
{
    return CLI::Validator(
        [fits = std::move(fits), needs](std::string& text) {
            try {
                std::size_t used = 0;
                const double value = std::stod(text, &used);
                if (used == text.size() && std::isfinite(value) && fits(value))
                    return std::string();
            } catch (const std::exception&) {
            }
            return "needs " + needs + ", not '" + text + "'";
        },
        "");
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
