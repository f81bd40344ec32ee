#include "agent/runtime/communicator.h"

namespace meshbench::agent {

PendingComm& PendingComm::operator=(PendingComm&& other) noexcept
{
    if (this != &other) {
        finishQuietly();
        m_operation = std::move(other.m_operation);
    }
    return *this;
}

PendingComm::~PendingComm() { finishQuietly(); }

void PendingComm::wait()
{
    if (!m_operation)
        return;
    // Released first: an operation that failed is not waited for again on destruction.
    const std::unique_ptr<Operation> operation = std::move(m_operation);
    operation->wait();
}

bool PendingComm::done()
{
    if (!m_operation || !m_operation->test())
        return !m_operation;
    m_operation.reset();
    return true;
}

void PendingComm::finishQuietly() noexcept
{
    // Only reached for an operation nobody waited for, on the way out of a failed step: the
    // failure being reported already is the one that matters.
    try {
        wait();
    } catch (const std::exception&) {
    }
}

void Communicator::waitSends()
{
    for (PendingComm& send : m_sends)
        send.wait();
    m_sends.clear();
}

}  // namespace meshbench::agent
