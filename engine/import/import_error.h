#pragma once
// What is wrong with an input of `meshbench-engine import`: the message names the file and, where
// it can, the event (its index or timestamp) and the fix.

#include <stdexcept>

namespace meshbench::import {

class ImportError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace meshbench::import
