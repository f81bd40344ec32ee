#include "agent/distributed/pipeline_executor.h"

#include "plan/capability.h"
#include "plan/op_span_kind.h"

#include <map>

namespace meshbench::agent {

PipelineExecutor::PipelineExecutor(GptModel& model, kernels::Backend& backend, Communicator& pipeline,
                                   plan::Schedule schedule, int stage, std::vector<int> pipelineRanks)
    : m_model(model), m_backend(backend), m_pipeline(pipeline), m_schedule(std::move(schedule)), m_stage(stage),
      m_pipelineRanks(std::move(pipelineRanks))
{
    const plan::ScheduleShape& shape = m_schedule.shape;
    // The capability rule refuses such a spec before launch; this guards a schedule built some other way.
    if (plan::pipelineMessageTags(shape) > plan::kMaxPipelineMessageTags)
        throw CommError("the schedule has " + std::to_string(shape.microbatches) + " micro-batches x " +
                        std::to_string(shape.stages * shape.virtualStages) +
                        " virtual stages, more messages than MPI tags can name; use fewer, larger micro-batches");
}

int PipelineExecutor::tagOf(int microbatch, int virtualStage, bool gradient) const
{
    const plan::ScheduleShape& shape = m_schedule.shape;
    return (microbatch * shape.stages * shape.virtualStages + virtualStage) * 2 + (gradient ? 1 : 0);
}

void PipelineExecutor::runStep(const std::function<const std::int32_t*(int)>& tokensOf, int batch, float lossScale,
                               float auxScale, ForwardResult& result, int step, Measurements& measurements,
                               GradientListener* finished)
{
    const plan::ScheduleShape& shape = m_schedule.shape;
    const std::size_t elements = m_model.streamElements(batch);
    // What is in flight, by (micro-batch, chunk).
    struct Slot {
        DeviceBuffer input, output, outputGrad, inputGrad;
        GptModel::ActivationsPtr activations;
        std::vector<DeferredWeightGrad> weightGrads;  // zb-h1: B queues them, W runs them
    };
    std::map<std::pair<int, int>, Slot> slots;
    std::vector<DeviceBuffer> sent;  // kept until the sends complete

    // The virtual stage next to vs in model order when it is on this stage too (the V schedules'
    // turn on the last stage), whose chunk then takes the tensor without a transfer; -1 otherwise.
    const int lastVirtualStage = shape.stages * shape.virtualStages - 1;
    auto localChunk = [&](int vs) {
        return vs >= 0 && vs <= lastVirtualStage && shape.stageOf(vs) == m_stage ? shape.chunkOf(vs) : -1;
    };

    for (const plan::Op& op : m_schedule.stages[std::size_t(m_stage)]) {
        GradientListener* last = op.microbatch == shape.microbatches - 1 ? finished : nullptr;
        Slot& slot = slots[{op.microbatch, op.chunk}];
        const int virtualStage = shape.virtualStageOf(m_stage, op.chunk);
        const bool compute = plan::isCompute(op.kind);
        const Span span{step,
                        std::int16_t(m_stage),
                        std::int16_t(op.chunk),
                        op.microbatch,
                        plan::spanKindOf(op.kind),
                        compute ? -1 : m_pipelineRanks[std::size_t(op.peerStage)],
                        0,
                        0,
                        compute ? 0 : elements * sizeof(float)};
        const Measurements::Range range(span);
        const kernels::TimeMark begin = measurements.mark();
        switch (op.kind) {
        case plan::OpKind::RecvActivation:
            slot.input = DeviceBuffer(m_backend, elements);
            m_pipeline.recv(slot.input.ptr(), elements, op.peerStage, tagOf(op.microbatch, virtualStage, false));
            break;
        case plan::OpKind::Forward:
            slot.output = DeviceBuffer(m_backend, elements);
            slot.activations = m_model.forward(op.chunk, {tokensOf(op.microbatch), batch}, slot.input.ptr(),
                                               slot.output.ptr(), lossScale, auxScale, result);
            slot.input = DeviceBuffer();
            if (const int next = localChunk(virtualStage + 1); next >= 0)
                slots[{op.microbatch, next}].input = std::move(slot.output);
            break;
        case plan::OpKind::SendActivation:
            m_pipeline.send(slot.output.ptr(), elements, op.peerStage, tagOf(op.microbatch, virtualStage + 1, false));
            sent.push_back(std::move(slot.output));
            break;
        case plan::OpKind::RecvGradient:
            slot.outputGrad = DeviceBuffer(m_backend, elements);
            m_pipeline.recv(slot.outputGrad.ptr(), elements, op.peerStage, tagOf(op.microbatch, virtualStage, true));
            break;
        case plan::OpKind::Backward:
            slot.inputGrad = DeviceBuffer(m_backend, elements);
            m_model.backward(*slot.activations, slot.outputGrad.ptr(), slot.inputGrad.ptr(),
                             m_schedule.splitBackward() ? &slot.weightGrads : nullptr, last);
            slot.activations.reset();
            slot.outputGrad = DeviceBuffer();
            if (const int previous = localChunk(virtualStage - 1); previous >= 0)
                slots[{op.microbatch, previous}].outputGrad = std::move(slot.inputGrad);
            break;
        case plan::OpKind::SendGradient:
            m_pipeline.send(slot.inputGrad.ptr(), elements, op.peerStage, tagOf(op.microbatch, virtualStage - 1, true));
            sent.push_back(std::move(slot.inputGrad));
            break;
        case plan::OpKind::WeightGrad:
            m_model.applyWeightGradients(slot.weightGrads);
            if (last)
                last->gradientsReady(m_model.chunkViews(op.chunk));
            break;
        }
        measurements.addSpan(span, begin, measurements.mark());
    }
    m_pipeline.waitSends();
}

}  // namespace meshbench::agent
