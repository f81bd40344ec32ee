#include "op_span_kind.h"

namespace meshbench::plan {

wire::SpanKind spanKindOf(OpKind kind)
{
    switch (kind) {
    case OpKind::Forward:
        return wire::SpanKind::Forward;
    case OpKind::Backward:
        return wire::SpanKind::Backward;
    case OpKind::WeightGrad:
        return wire::SpanKind::WeightGrad;
    case OpKind::SendActivation:
        return wire::SpanKind::SendActivation;
    case OpKind::RecvActivation:
        return wire::SpanKind::RecvActivation;
    case OpKind::SendGradient:
        return wire::SpanKind::SendGradient;
    case OpKind::RecvGradient:
        return wire::SpanKind::RecvGradient;
    }
    return wire::SpanKind::Idle;  // not reached: the switch names every kind
}

}  // namespace meshbench::plan
