#pragma once
// What an errno value means, in the C library's words, from any thread: strerror may share one
// buffer between threads (glibc's manual marks it MT-Unsafe); strerror_r writes into the caller's.

#include <string>

namespace meshbench::wire {

std::string errorText(int error);

}  // namespace meshbench::wire
