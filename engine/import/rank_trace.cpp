#include "rank_trace.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace meshbench::import {

std::int32_t NameTable::id(std::string_view name)
{
    if (auto found = m_ids.find(name); found != m_ids.end())
        return found->second;
    const auto id = static_cast<std::int32_t>(m_names.size());
    m_names.emplace_back(name);
    m_classes.push_back(classifyKernel(name));
    m_ids.emplace(std::string(name), id);
    return id;
}

namespace {

bool containsNoCase(std::string_view text, std::string_view word)
{
    return std::search(text.begin(), text.end(), word.begin(), word.end(),
                       [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; }) != text.end();
}

}  // namespace

store::DeviceClass classifyKernel(std::string_view name)
{
    // NCCL names its kernels ncclKernel_* (before 2.19) and ncclDevKernel_* (after).
    if (name.starts_with("nccl"))
        return store::DeviceClass::CommOther;
    // Attention first: flash-attention and cuDNN's fused attention run GEMMs inside.
    constexpr std::array kAttention{"flash", "fmha", "attention", "attn", "sdpa"};
    for (const char* word : kAttention)
        if (containsNoCase(name, word))
            return store::DeviceClass::Attention;
    // cuBLAS(Lt), CUTLASS and their kernels' names (sm90_xmma_gemm_*, nvjet_*, ampere_sgemm_*).
    constexpr std::array kGemm{"gemm", "xmma", "cutlass", "matmul", "nvjet", "cublas", "wgmma"};
    for (const char* word : kGemm)
        if (containsNoCase(name, word))
            return store::DeviceClass::Gemm;
    return store::DeviceClass::OtherCompute;
}

std::vector<int> ranksListed(std::string_view text)
{
    std::vector<int> ranks;
    int value = 0;
    bool inNumber = false;
    for (char c : text) {
        if (c >= '0' && c <= '9') {
            value = value * 10 + (c - '0');
            inNumber = true;
        } else if (inNumber) {
            ranks.push_back(value);
            value = 0;
            inNumber = false;
        }
    }
    if (inNumber)
        ranks.push_back(value);
    return ranks;
}

void sortTrace(RankTrace& trace)
{
    std::stable_sort(trace.ranges.begin(), trace.ranges.end(),
                     [](const HostRange& a, const HostRange& b) { return a.beginNs < b.beginNs; });
    std::stable_sort(trace.launches.begin(), trace.launches.end(),
                     [](const Launch& a, const Launch& b) { return a.ns < b.ns; });
    std::stable_sort(trace.device.begin(), trace.device.end(),
                     [](const DeviceEvent& a, const DeviceEvent& b) { return a.beginNs < b.beginNs; });
}

}  // namespace meshbench::import
