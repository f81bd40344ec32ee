#pragma once
// Plays a stored session back on the live feed, as a live run would publish it, steered by its
// worker: pause, speed, seek to a step, close.

#include "worker.h"

#include "store/session_store.h"

#include <zmq.hpp>

#include <memory>
#include <string>

namespace meshbench::service {

// Re-publishes `session` in time order at the worker's speed x real time, through the same
// aggregates as a live run, on a feed named after the worker's source. With endWhenDone it returns
// at the session's end; otherwise it waits there for a seek or a close. Throws what reading the
// session throws (store::SessionError); sets worker.done when it returns normally.
void playSession(zmq::context_t& context, Worker& worker, const std::shared_ptr<store::SessionReader>& reader,
                 const std::string& session, bool endWhenDone);

}  // namespace meshbench::service
