#include "live_publisher.h"

#include "live/feed_json.h"

#include "wire/text.h"

#include <algorithm>
#include <variant>

namespace meshbench::service {

LivePublisher::LivePublisher(zmq::context_t& context, std::string source)
    : m_source(std::move(source)), m_push(context, zmq::socket_type::push)
{
    m_push.set(zmq::sockopt::linger, 1000);
    m_push.connect(kLiveInproc);
}

void LivePublisher::send(wire::LiveKind kind, const void* data, std::size_t size)
{
    const std::string topic = wire::liveTopic(kind, m_source);
    m_push.send(zmq::buffer(topic), zmq::send_flags::sndmore);
    m_push.send(zmq::const_buffer(data, size), zmq::send_flags::none);
}

void LivePublisher::send(wire::LiveKind kind, const nlohmann::json& payload)
{
    const std::string text = wire::jsonText(payload);
    send(kind, text.data(), text.size());
}

void LivePublisher::step(const live::StepAggregate& step)
{
    nlohmann::json payload = live::toJson(step);
    payload["source"] = m_source;
    send(wire::LiveKind::Step, payload);
}

void LivePublisher::memory(const live::RankMemory& memory)
{
    nlohmann::json payload = live::toJson(memory);
    payload["source"] = m_source;
    send(wire::LiveKind::Memory, payload);
}

void LivePublisher::job(nlohmann::json status)
{
    status["type"] = "job";
    status["source"] = m_source;
    status["spans_decimated"] = m_decimated;
    send(wire::LiveKind::Job, status);
}

void LivePublisher::log(std::uint32_t rank, wire::LogLevel level, const std::string& text)
{
    send(wire::LiveKind::Log, nlohmann::json{{"type", "log"},
                                             {"source", m_source},
                                             {"rank", rank},
                                             {"level", wire::logLevelName(level)},
                                             {"text", text}});
}

void LivePublisher::spans(const wire::Batch& batch)
{
    Budget& budget = m_budgets[batch.rank];
    const auto now = std::chrono::steady_clock::now();
    budget.tokens =
        std::min(kSpansPerRankPerSecond,
                 budget.tokens + kSpansPerRankPerSecond * std::chrono::duration<double>(now - budget.refilled).count());
    budget.refilled = now;
    wire::Batch kept{batch.rank, batch.sequence, {}};
    for (const wire::Record& record : batch.records)
        if (std::holds_alternative<wire::SpanRecord>(record)) {
            if (budget.tokens >= 1) {
                budget.tokens -= 1;
                kept.records.push_back(record);
            } else {
                ++m_decimated;
            }
        }
    if (kept.records.empty())
        return;
    m_frame.clear();
    wire::encodeBatch(kept, m_frame);
    send(wire::LiveKind::Spans, m_frame.data(), m_frame.size());
}

}  // namespace meshbench::service
