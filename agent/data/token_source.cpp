#include "agent/data/token_source.h"

#include "agent/data/markov_source.h"
#include "agent/data/token_file_source.h"

namespace meshbench::agent {

std::unique_ptr<TokenSource> makeTokenSource(const plan::DataSpec& data, int vocab, int seqLen, std::uint64_t seed)
{
    if (data.source == plan::DataSource::File)
        return std::make_unique<TokenFileSource>(data.path, data.dtype, vocab, seqLen);
    return std::make_unique<MarkovSource>(vocab, data.order, data.branchingFor(vocab), seed);
}

}  // namespace meshbench::agent
