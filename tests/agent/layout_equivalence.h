#pragma once
// What the tests that hold a layout to one device share (tst_parallel under mpirun, tst_trainer
// in-process): the small model they train, the agreement of two step metrics, and the bound on
// two checkpoints of the same model.

#include "agent/checkpoint/safetensors.h"

#include <QString>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace meshbench::agent::testing {

// 4 layers, hidden 32, GQA, SwiGLU, RMSNorm, tied embeddings (the default). With MoE every token
// goes to every expert, none dropped: top-k selection and capacity are discontinuous, and a
// last-bit difference could flip a near-tie and change a loss by far more than rounding.
inline nlohmann::json equivalenceModel(bool moe)
{
    nlohmann::json model = {
        {"layers", 4},   {"hidden", 32},           {"heads", 4},       {"kv_heads", 2}, {"vocab", 64},
        {"seq_len", 16}, {"activation", "swiglu"}, {"norm", "rmsnorm"}};
    if (moe)
        model["moe"] = {{"experts", 4}, {"top_k", 4}, {"capacity_factor", 4.0}, {"every_n_layers", 2}};
    return model;
}

// A job of that model on `ranks` CPU devices: `parallel` (the layout's keys) gets 4 micro-batches of 2
// and 10 KiB gradient buckets, a dozen or so for this model, so that the reduction overlaps the
// backward bucket by bucket.
inline nlohmann::json equivalenceJob(bool moe, nlohmann::json parallel, int ranks, int steps, double lr)
{
    parallel["microbatches"] = 4;
    parallel["micro_batch_size"] = 2;
    parallel["grad_bucket_mb"] = 0.01;
    return {{"model", equivalenceModel(moe)},
            {"parallel", parallel},
            {"cluster", {{"nodes", 1}, {"devices_per_node", ranks}, {"device", "cpu"}}},
            {"train", {{"steps", steps}, {"lr", lr}, {"grad_clip", 0.5}}}};
}

inline bool agrees(double a, double b, double relative)
{
    return std::abs(a - b) <= relative * std::max(std::abs(b), 1e-6);
}

// The first element of two checkpoints of the same model outside the bound, or empty. Adam
// normalises every element's update to about lr whatever the gradient's size, so an element whose
// gradient is near zero - where two summation orders' ~1e-7 relative rounding is a large part of
// it - may move by a visibly different fraction of lr: parameters get 1e-5 of the tensor's scale
// plus 1e-3 of the most Adam can move an element (adamReach = lr x steps); a wrong data shard or a
// missing reduction moves elements by O(lr) per step and fails it. Adam's moments (under ZeRO
// gathered from the shards: a shard in the wrong place is off by its whole size) follow the
// gradients, which the parameters' differences perturb at the 1e-4 level: 1e-3 of their scale.
inline QString checkpointMismatch(const QString& single, const QString& parallel, double adamReach)
{
    const SafetensorsFile x = SafetensorsFile::open(single.toStdString());
    const SafetensorsFile y = SafetensorsFile::open(parallel.toStdString());
    if (y.names().size() != x.names().size() || x.names().size() <= 10)
        return QStringLiteral("%1 tensors against %2").arg(y.names().size()).arg(x.names().size());
    for (const std::string& name : x.names()) {
        const bool moment = name.rfind("optimizer.", 0) == 0;
        const std::vector<std::int64_t> shape = x.shape(name);
        std::size_t n = 1;
        for (std::int64_t d : shape)
            n *= std::size_t(d);
        std::vector<float> p(n), q(n);
        x.readF32(name, shape, p.data());
        y.readF32(name, shape, q.data());
        float scale = 0;
        for (float v : p)
            scale = std::max(scale, std::abs(v));
        const double bound = moment ? 1e-3 * scale : 1e-5 * scale + 1e-3 * adamReach;
        for (std::size_t i = 0; i < n; ++i)
            if (std::abs(p[i] - q[i]) > bound)
                return QStringLiteral("%1[%2]: one device %3, layout %4 (bound %5)")
                    .arg(QString::fromStdString(name))
                    .arg(i)
                    .arg(p[i])
                    .arg(q[i])
                    .arg(bound);
    }
    return {};
}

}  // namespace meshbench::agent::testing
