#include "host_name.h"

#include <unistd.h>

namespace meshbench::wire {

std::string localHostName()
{
    char name[256] = {};
    return gethostname(name, sizeof name - 1) == 0 ? name : "localhost";
}

}  // namespace meshbench::wire
