// meshbench-spec-reference [FILE]: prints the job-spec reference made from the schema, or writes
// it between the markers of FILE (docs/job-spec.md; `cmake --build build --target spec-reference`).

#include "spec_reference.h"

#include <fstream>
#include <iostream>
#include <sstream>

int main(int argc, char** argv)
{
    using namespace meshbench::plan;
    if (argc == 1) {
        std::cout << specReference();
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        std::cerr << "usage: meshbench-spec-reference [FILE]\n"
                     "  prints the job-spec reference, or writes it between the markers of FILE\n";
        return 2;
    }
    const std::string path = argv[1];
    std::ostringstream text;
    {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            std::cerr << "meshbench-spec-reference: cannot read " << path << "\n";
            return 1;
        }
        text << in.rdbuf();
    }
    const std::optional<std::string> updated = withSpecReference(text.str());
    if (!updated) {
        std::cerr << "meshbench-spec-reference: " << path << " lacks the markers\n  " << kSpecReferenceBegin << "\n  "
                  << kSpecReferenceEnd << "\nput them, each on a line of its own, where the reference belongs\n";
        return 1;
    }
    if (*updated == text.str())
        return 0;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << *updated;
    if (!out) {
        std::cerr << "meshbench-spec-reference: cannot write " << path << "\n";
        return 1;
    }
    std::cout << "meshbench-spec-reference: wrote the spec reference into " << path << "\n";
    return 0;
}
